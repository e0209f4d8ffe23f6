-- Tenant policies (issue 16). A tenant's row holds only the keys an
-- operator set (JSON object text); every other key follows the server's
-- configuration, so changing a configured default reaches every tenant
-- that did not override it.
CREATE TABLE policies (
    tenant     TEXT PRIMARY KEY REFERENCES tenants(name) ON DELETE CASCADE,
    policy     TEXT NOT NULL,              -- {"key": value, ...}: the overrides
    updated_at INTEGER NOT NULL
);

-- Execs gain the states of approval and the record of what applied. SQLite
-- cannot alter a CHECK constraint: the table is rebuilt (nothing refers to it).
CREATE TABLE execs_new (
    tenant        TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
    id            TEXT NOT NULL,
    session       BLOB NOT NULL,
    command       TEXT NOT NULL,
    cwd           TEXT NOT NULL,
    request_hash  TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('pending_approval', 'running', 'exited', 'timed_out',
                                                 'cancelled', 'rejected', 'lost')),
    exit_code     INTEGER,
    result        TEXT,
    started_at    INTEGER NOT NULL,        -- requested; once approved, when it started
    finished_at   INTEGER,
    exit_event_id INTEGER,
    policy        TEXT,                    -- the effective policy it ran under (JSON); NULL before 0004
    requested_by  TEXT,                    -- the requesting token's sub
    decision      TEXT CHECK (decision IN ('approved', 'rejected')),
    decided_by    TEXT,                    -- the approving token's sub; NULL when the timeout decided
    decided_at    INTEGER,
    reason        TEXT,
    PRIMARY KEY (tenant, id)
);
INSERT INTO execs_new (tenant, id, session, command, cwd, request_hash, state, exit_code, result,
                       started_at, finished_at, exit_event_id)
    SELECT tenant, id, session, command, cwd, request_hash, state, exit_code, result,
           started_at, finished_at, exit_event_id FROM execs;
DROP TABLE execs;
ALTER TABLE execs_new RENAME TO execs;
CREATE INDEX execs_tenant_started ON execs(tenant, started_at DESC);
CREATE INDEX execs_state ON execs(state);

-- Who acted: the token's sub claim (NULL when it had none, or for
-- requests that named no tenant).
ALTER TABLE audit ADD COLUMN sub TEXT;
