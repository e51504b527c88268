#!lua flags=no-writes
-- sweeper/tenants: one page of the global tenant registry, in lex order, with
-- the registry's size (the sweeper, the archiver, the operator and admin
-- walks and the admin overview all page tenants with it).
--
-- KEYS: 1 tenants     cy:tenants (zset of tenant ids, all scores 0)
-- ARGV: 1 after       the last tenant id of the previous page ('' for the first page)
--       2 page_size   1..10000
--
-- Result ok({now = Redis TIME ms, n = tenants registered, tenants = [id, ...]})
-- (tenants encodes as {} when empty). A page shorter
-- than the page size is the last one. The cursor is a member, not an offset,
-- so tenants added during a walk never shift it: a tenant added behind the
-- cursor is visited by the next sweep, one added ahead of it by this one.
-- Refusals: INVALID_REQUEST (page size out of range).
-- include: lib/paging.lua

local limit, refused = paging.size(ARGV[2], 10000, 'page size')
if not limit then return refused end
local tenants = redis.call('ZRANGEBYLEX', KEYS[1], paging.after(ARGV[1]), '+', 'LIMIT', 0, limit)
return ok({now = now_ms(), n = redis.call('ZCARD', KEYS[1]), tenants = tenants})
