#!lua flags=no-writes
-- sweeper/tenants: one page of the global tenant registry, in lex order.
--
-- KEYS: 1 tenants     cy:tenants (zset of tenant ids, all scores 0)
-- ARGV: 1 after       the last tenant id of the previous page ('' for the first page)
--       2 page_size   1..10000
--
-- Result ok({tenants = [id, ...]}) (encodes as {} when empty). A page shorter
-- than the page size is the last one. The cursor is a member, not an offset,
-- so tenants added during a walk never shift it: a tenant added behind the
-- cursor is visited by the next sweep, one added ahead of it by this one.

local limit = tonumber(ARGV[2])
if not limit or limit < 1 or limit > 10000 or limit ~= math.floor(limit) then
  return fail('INVALID_REQUEST', 'page size must be 1..10000')
end
local min = '-'
if ARGV[1] ~= nil and ARGV[1] ~= '' then min = '(' .. ARGV[1] end
return ok({tenants = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, limit)})
