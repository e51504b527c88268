#!lua flags=no-writes
-- admin/verify_api_key: read what authentication needs, in one round trip.
--
-- KEYS[1] = API key hash
-- KEYS[2] = tenant record hash
-- Result: ok({hash, status, tenant_id, tenant_status}); '' for anything absent.
-- Read only; the hash comparison happens in Go (constant time).

local k = redis.call('HMGET', KEYS[1], 'hash', 'status', 'tenant_id')
local ts = redis.call('HGET', KEYS[2], 'status')
return ok({hash = k[1] or '', status = k[2] or '', tenant_id = k[3] or '', tenant_status = ts or ''})
