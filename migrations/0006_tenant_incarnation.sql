-- Tenant incarnations (issue 26 item 10). A tenant removed and added
-- again under its name is another tenant: each life gets an id never
-- given before (AUTOINCREMENT never reuses one), its records carry it, and
-- a tenant reads only the rows of its own life. The lives also keep the
-- uid slots they held: a slot of a removed life is not given to a new
-- tenant (its files and processes were that uid's), except to the same
-- name re-added with --reuse-leftovers.
CREATE TABLE tenant_lives (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,  -- the incarnation
    name       TEXT NOT NULL,
    slot       INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    removed_at INTEGER                              -- NULL while it lives
);
CREATE INDEX tenant_lives_name ON tenant_lives(name, id);
CREATE INDEX tenant_lives_slot ON tenant_lives(slot);
INSERT INTO tenant_lives (name, slot, created_at)
    SELECT name, slot, created_at FROM tenants ORDER BY created_at, name;

ALTER TABLE tenants ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
UPDATE tenants SET incarnation = (SELECT MAX(l.id) FROM tenant_lives l WHERE l.name = tenants.name);

-- Rows written before this migration are the living tenant's of that
-- name (earlier lives' cannot be told apart any more); execs, sessions,
-- transfers and policies of a removed tenant went with it (cascade).
ALTER TABLE audit ADD COLUMN incarnation INTEGER;
UPDATE audit SET incarnation = (SELECT t.incarnation FROM tenants t WHERE t.name = audit.tenant)
    WHERE tenant != '';
CREATE INDEX audit_tenant_incarnation_id ON audit(tenant, incarnation, id);

ALTER TABLE execs ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;
UPDATE execs SET incarnation = (SELECT t.incarnation FROM tenants t WHERE t.name = execs.tenant);
-- A row of an earlier life cannot be written under the new one (a
-- command a running server started for the removed tenant).
CREATE TRIGGER execs_incarnation BEFORE INSERT ON execs
    WHEN NEW.incarnation != (SELECT t.incarnation FROM tenants t WHERE t.name = NEW.tenant)
BEGIN
    SELECT RAISE(ABORT, 'exec of another life of its tenant');
END;
