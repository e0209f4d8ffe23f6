-- The egress ledger (issue 29): one row per connection, DNS refusal or
-- dropped datagram of a command with network, as the egress gateway saw
-- it (sandbox/egress/gateway.h), written in batches by the store's writer
-- thread like the audit. Rows are the tenant's life's (incarnation, as
-- audit rows are: a tenant removed and added again never reads them) and
-- stay until retention, which prunes them by ended_at with the same
-- max-age and max-rows as audit and exec rows (store/retention.c).
CREATE TABLE egress (
    id          INTEGER PRIMARY KEY,       -- also the pagination cursor
    tenant      TEXT NOT NULL,
    incarnation INTEGER NOT NULL DEFAULT 0,
    exec_id     TEXT NOT NULL DEFAULT '',
    sub         TEXT,
    proto       TEXT NOT NULL,             -- tls, http, tcp, dns, udp
    name        TEXT,                      -- SNI, Host, DNS question; NULL: none seen
    name_source TEXT,                      -- sni, host, dns; NULL
    dialled     TEXT NOT NULL DEFAULT '',  -- what the command dialled
    addr        TEXT,                      -- what the gateway connected to; NULL: nothing
    port        INTEGER NOT NULL,
    verdict     TEXT NOT NULL CHECK (verdict IN ('allowed', 'denied')),
    reason      TEXT,
    bytes_up    INTEGER NOT NULL DEFAULT 0,
    bytes_down  INTEGER NOT NULL DEFAULT 0,
    started_at  INTEGER NOT NULL,
    ended_at    INTEGER NOT NULL
);
-- GET /exec/{id}/egress pages an exec's rows by id.
CREATE INDEX egress_exec ON egress(tenant, exec_id, id);
-- Retention by age.
CREATE INDEX egress_ended ON egress(ended_at);
-- GET /audit?egress=denied: does this exec have a refused record?
CREATE INDEX egress_denied ON egress(tenant, exec_id) WHERE verdict = 'denied';

-- The exec an audit row's request ran (POST /exec), so the audit can be
-- filtered by its egress. NULL for every other request and for rows
-- written before. Its few bytes are within the fixed per-row overhead the
-- store budget counts for an audit row (migrations/0007).
ALTER TABLE audit ADD COLUMN exec_id TEXT;

-- Egress rows count against their tenant's store budget like its audit
-- rows (migrations/0007): a fixed overhead plus their texts.
CREATE TRIGGER egress_usage_insert AFTER INSERT ON egress BEGIN
    INSERT INTO store_usage (tenant, life, rows, bytes) VALUES (NEW.tenant, NEW.incarnation, 1,
        128 + length(NEW.exec_id) + ifnull(length(NEW.sub), 0) + ifnull(length(CAST(NEW.name AS BLOB)), 0)
        + length(NEW.dialled) + ifnull(length(NEW.addr), 0) + ifnull(length(CAST(NEW.reason AS BLOB)), 0))
    ON CONFLICT (tenant, life) DO UPDATE SET rows = rows + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER egress_usage_delete AFTER DELETE ON egress BEGIN
    UPDATE store_usage SET rows = rows - 1, bytes = bytes - (
        128 + length(OLD.exec_id) + ifnull(length(OLD.sub), 0) + ifnull(length(CAST(OLD.name AS BLOB)), 0)
        + length(OLD.dialled) + ifnull(length(OLD.addr), 0) + ifnull(length(CAST(OLD.reason AS BLOB)), 0))
        WHERE tenant = OLD.tenant AND life = OLD.incarnation;
END;
