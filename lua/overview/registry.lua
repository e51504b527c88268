#!lua flags=no-writes
-- overview/registry: one page of the tenant registry for the admin overview
-- (internal/overview), with the registry's size.
--
-- KEYS: 1 tenants     cy:tenants (zset of tenant ids, all scores 0)
-- ARGV: 1 after       the last tenant id of the previous page ('' = from the first)
--       2 page_size   1..1000
-- Result: ok({now = Redis TIME ms, n = tenants registered, tenants = [id, ...]}) in lex order
--   (tenants encodes as {} when empty).
-- Refusals: INVALID_REQUEST (page size out of range).

local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit > 1000 or limit ~= math.floor(limit) then
  return fail('INVALID_REQUEST', 'overview/registry: page size must be 1..1000')
end
local min = '-'
if ARGV[1] ~= '' then min = '(' .. ARGV[1] end
return ok({now = now_ms(), n = redis.call('ZCARD', KEYS[1]), tenants = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, limit)})
