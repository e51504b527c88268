-- Schema version 2: archived events and audit entries can be listed in
-- their stream's order. The order is the Redis stream id (ms, seq): ms is
-- occurred_at, seq gets its own column; audit entries also record whether
-- they came from the global audit log (operations on no tenant), since
-- such an entry may name a tenant and is then stored under it.

ALTER TABLE cycles_events ADD COLUMN seq bigint NOT NULL DEFAULT 0;
ALTER TABLE cycles_audit_entries ADD COLUMN seq bigint NOT NULL DEFAULT 0;
ALTER TABLE cycles_audit_entries ADD COLUMN global boolean NOT NULL DEFAULT false;

-- Rows written before: the seq is in the body's leading stream id
-- (one length byte, then "<ms>-<seq>"); an entry of the global log is
-- recognised by its sentinel tenant.
UPDATE cycles_events
   SET seq = split_part(convert_from(substring(body FROM 2 FOR get_byte(body, 0)), 'UTF8'), '-', 2)::bigint
 WHERE get_byte(body, 0) < 128;
UPDATE cycles_audit_entries
   SET seq = split_part(convert_from(substring(body FROM 2 FOR get_byte(body, 0)), 'UTF8'), '-', 2)::bigint,
       global = tenant_id IN ('__admin__', '__unauth__')
 WHERE get_byte(body, 0) < 128;

-- A tenant's stream in order (ListEvents, audit listings past Redis
-- retention), tenant first as every key.
CREATE INDEX cycles_events_order ON cycles_events (tenant_id, occurred_at, seq);
CREATE INDEX cycles_audit_entries_order ON cycles_audit_entries (tenant_id, global, occurred_at, seq);
-- The global audit log in order, across the tenants its entries name.
CREATE INDEX cycles_audit_entries_global ON cycles_audit_entries (occurred_at, seq) WHERE global;
