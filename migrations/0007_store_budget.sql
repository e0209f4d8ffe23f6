-- What the store holds on each tenant's behalf (issue 26): its exec rows
-- and audit rows, counted and sized here as they are written and deleted
-- (retention, tenant removal), so a tenant's store budget
-- (tenant-store-max-rows, tenant-store-max-bytes) is checked with one
-- primary-key read. bytes is what the rows' texts and blobs take, plus a
-- fixed overhead per row for its other columns and its index entries.
-- Audit rows of unauthenticated requests are counted under ''. Usage is
-- kept per life of a tenant (migrations/0006): a name removed and added
-- again starts with nothing of the old life's rows counted against it,
-- and retention of the old life's audit rows frees the old life's count.
-- Rows of no known life (a request that named the tenant but was not
-- authenticated) count under life 0, which no budget reads.
CREATE TABLE store_usage (
    tenant TEXT NOT NULL,
    life   INTEGER NOT NULL,
    rows   INTEGER NOT NULL DEFAULT 0,
    bytes  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, life)
) WITHOUT ROWID;

INSERT INTO store_usage (tenant, life, rows, bytes)
    SELECT tenant, life, count(*), sum(b) FROM (
        SELECT tenant, ifnull(incarnation, 0) AS life, 256 + length(CAST(command AS BLOB)) + length(CAST(cwd AS BLOB)) + length(session)
               + ifnull(length(CAST(result AS BLOB)), 0) + ifnull(length(CAST(policy AS BLOB)), 0)
               + ifnull(length(CAST(reason AS BLOB)), 0) AS b FROM execs
        UNION ALL
        SELECT tenant, ifnull(incarnation, 0), 128 + ifnull(length(CAST(target AS BLOB)), 0) + ifnull(length(session), 0)
               + length(request_id) + length(route) + ifnull(length(client), 0) + ifnull(length(sub), 0)
               FROM audit)
    GROUP BY tenant, life;

CREATE TRIGGER execs_usage_insert AFTER INSERT ON execs BEGIN
    INSERT INTO store_usage (tenant, life, rows, bytes) VALUES (NEW.tenant, ifnull(NEW.incarnation, 0), 1,
        256 + length(CAST(NEW.command AS BLOB)) + length(CAST(NEW.cwd AS BLOB)) + length(NEW.session)
        + ifnull(length(CAST(NEW.result AS BLOB)), 0) + ifnull(length(CAST(NEW.policy AS BLOB)), 0)
        + ifnull(length(CAST(NEW.reason AS BLOB)), 0))
    ON CONFLICT (tenant, life) DO UPDATE SET rows = rows + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER execs_usage_update AFTER UPDATE OF result, reason, policy ON execs BEGIN
    UPDATE store_usage SET bytes = bytes
        + ifnull(length(CAST(NEW.result AS BLOB)), 0) - ifnull(length(CAST(OLD.result AS BLOB)), 0)
        + ifnull(length(CAST(NEW.reason AS BLOB)), 0) - ifnull(length(CAST(OLD.reason AS BLOB)), 0)
        + ifnull(length(CAST(NEW.policy AS BLOB)), 0) - ifnull(length(CAST(OLD.policy AS BLOB)), 0)
        WHERE tenant = NEW.tenant AND life = ifnull(NEW.incarnation, 0);
END;

CREATE TRIGGER execs_usage_delete AFTER DELETE ON execs BEGIN
    UPDATE store_usage SET rows = rows - 1, bytes = bytes - (
        256 + length(CAST(OLD.command AS BLOB)) + length(CAST(OLD.cwd AS BLOB)) + length(OLD.session)
        + ifnull(length(CAST(OLD.result AS BLOB)), 0) + ifnull(length(CAST(OLD.policy AS BLOB)), 0)
        + ifnull(length(CAST(OLD.reason AS BLOB)), 0))
        WHERE tenant = OLD.tenant AND life = ifnull(OLD.incarnation, 0);
END;

CREATE TRIGGER audit_usage_insert AFTER INSERT ON audit BEGIN
    INSERT INTO store_usage (tenant, life, rows, bytes) VALUES (NEW.tenant, ifnull(NEW.incarnation, 0), 1,
        128 + ifnull(length(CAST(NEW.target AS BLOB)), 0) + ifnull(length(NEW.session), 0)
        + length(NEW.request_id) + length(NEW.route) + ifnull(length(NEW.client), 0)
        + ifnull(length(NEW.sub), 0))
    ON CONFLICT (tenant, life) DO UPDATE SET rows = rows + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER audit_usage_delete AFTER DELETE ON audit BEGIN
    UPDATE store_usage SET rows = rows - 1, bytes = bytes - (
        128 + ifnull(length(CAST(OLD.target AS BLOB)), 0) + ifnull(length(OLD.session), 0)
        + length(OLD.request_id) + length(OLD.route) + ifnull(length(OLD.client), 0)
        + ifnull(length(OLD.sub), 0))
        WHERE tenant = OLD.tenant AND life = ifnull(OLD.incarnation, 0);
END;
