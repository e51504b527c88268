#!lua flags=no-writes
-- admin/verify_api_key: read what authentication needs, in one round trip.
--
-- KEYS: 1 api_key           API key hash
--       2 tenant_record     tenant record hash
-- ARGV: none
-- JSON admin/verify_api_key: hash status tenant_id tenant_status permissions
--   expires_at scope_filter now
-- Result: ok() of those, '' for anything absent. permissions is
--   the stored JSON array ('' for a key stored before keys had permissions),
--   scope_filter likewise ('' = no narrowing); now is Redis TIME in ms, the
--   clock expires_at is compared with.
-- Read only; the hash comparison and the expiry check happen in Go (the
-- expiry against now, never the client's or cyclesd's clock).

local k = redis.call('HMGET', KEYS[1], 'hash', 'status', 'tenant_id', 'permissions', 'expires_at', 'scope_filter')
local ts = redis.call('HGET', KEYS[2], 'status')
return ok({hash = k[1] or '', status = k[2] or '', tenant_id = k[3] or '', tenant_status = ts or '',
  permissions = k[4] or '', expires_at = k[5] or '', scope_filter = k[6] or '', now = string.format('%.0f', now_ms())})
