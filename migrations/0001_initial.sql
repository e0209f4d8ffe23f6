-- sandboxd schema, version 1. Times are Unix epoch milliseconds (INTEGER);
-- the HTTP layer renders them as RFC 3339.

CREATE TABLE tenants (
    name        TEXT PRIMARY KEY,
    alg         TEXT NOT NULL CHECK (alg IN ('HS256', 'RS256', 'ES256')),
    key         BLOB NOT NULL,
    operator    INTEGER NOT NULL DEFAULT 0 CHECK (operator IN (0, 1)),
    slot        INTEGER NOT NULL UNIQUE,   -- sandbox uid = uid_base + slot
    created_at  INTEGER NOT NULL
);

CREATE TABLE sessions (
    tenant       TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
    key          BLOB NOT NULL,            -- 1..512 printable bytes
    segment      TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, key),
    UNIQUE (tenant, segment)
);

CREATE TABLE transfers (
    token_hash  BLOB PRIMARY KEY,          -- SHA-256 of the token; the token itself is never stored
    tenant      TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
    session     BLOB NOT NULL,
    path        TEXT NOT NULL,             -- resolved workspace path
    direction   TEXT NOT NULL CHECK (direction IN ('read', 'write')),
    state       TEXT NOT NULL CHECK (state IN ('minted', 'active', 'done', 'failed', 'expired')),
    bytes       INTEGER NOT NULL DEFAULT 0,
    sha256      TEXT,
    error       TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL,
    started_at  INTEGER,
    finished_at INTEGER
);
CREATE INDEX transfers_state ON transfers(state, expires_at);
CREATE INDEX transfers_tenant_created ON transfers(tenant, created_at);

CREATE TABLE execs (
    tenant       TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
    id           TEXT NOT NULL,
    session      BLOB NOT NULL,
    command      TEXT NOT NULL,
    cwd          TEXT NOT NULL,
    request_hash TEXT NOT NULL,            -- idempotency: same id, same request
    state        TEXT NOT NULL CHECK (state IN ('running', 'exited', 'timed_out', 'cancelled', 'lost')),
    exit_code    INTEGER,
    result       TEXT,                     -- the ShellResult JSON once finished
    started_at   INTEGER NOT NULL,
    finished_at  INTEGER,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX execs_tenant_started ON execs(tenant, started_at DESC);
CREATE INDEX execs_state ON execs(state);

CREATE TABLE audit (
    id          INTEGER PRIMARY KEY,       -- also the pagination cursor
    at          INTEGER NOT NULL,
    tenant      TEXT NOT NULL DEFAULT '',  -- '' when the caller was not authenticated
    session     BLOB,
    request_id  TEXT NOT NULL,
    method      TEXT NOT NULL,
    route       TEXT NOT NULL,
    target      TEXT,
    status      INTEGER NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome IN ('ok', 'denied', 'error')),
    exit_code   INTEGER,
    bytes_in    INTEGER NOT NULL DEFAULT 0,
    bytes_out   INTEGER NOT NULL DEFAULT 0,
    duration_ms REAL NOT NULL DEFAULT 0,
    client      TEXT
);
CREATE INDEX audit_tenant_id ON audit(tenant, id);
CREATE INDEX audit_at ON audit(at);
