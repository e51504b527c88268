-- admin/register_tenant: add a tenant id to the global tenant registry.
--
-- KEYS: 1 tenants       cy:tenants (global registry zset, members lex-ordered, score 0)
-- ARGV: 1 tenant_id     tenant id
-- Result: ok({added = 0|1})
-- JSON admin/register_tenant: added
--
-- Runs BEFORE admin/create_tenant and in its own script because the registry is
-- a global key (on Cluster another slot than the tenant's keys). A registry
-- entry without a record is harmless (the sweeper finds nothing due there); a
-- record missing from the registry would hide the tenant from the sweeper.
-- Idempotent: re-adding an id changes nothing.

local added = redis.call('ZADD', KEYS[1], 0, ARGV[1])
return ok({added = added})
