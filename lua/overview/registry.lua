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
-- include: lib/paging.lua

local limit, refused = paging.size(ARGV[2], 1000, 'page size')
if not limit then return refused end
local tenants = redis.call('ZRANGEBYLEX', KEYS[1], paging.after(ARGV[1]), '+', 'LIMIT', 0, limit)
return ok({now = now_ms(), n = redis.call('ZCARD', KEYS[1]), tenants = tenants})
