#!lua flags=no-writes
-- admin/list_api_keys: one page of a tenant's API keys in key id (lex) order,
-- public fields only: the stored hash never leaves Redis.
--
-- KEYS: 1 tenant_record     tenant record hash
--       2 key_index         the tenant's key index (cy:{t:T}:apikeys, lex zset, score 0)
--       3 key_prefix        the key hash prefix "cy:{t:T}:apikey:"; a key's hash is
--                           KEYS[3] .. <key_id> (same slot)
-- ARGV: 1 tenant_id         tenant id (for the refusal message)
--       2 after             the last key id of the previous page ('' for the first page)
--       3 page_size         page size, 1..100
--       4 status            status filter ('' = any, else ACTIVE or REVOKED)
--       5 search            search text, lowercase ('' = none): kept when the key id or the
--                           lowercased name contains it (plain substring, no patterns)
--       6 scan              at most this many index entries are examined (bounds the work)
-- JSON admin/list_api_keys: items last more
-- Result: ok(): the keys' stored fields, the last key id examined ('' if none)
-- and whether more follow.
--   The next page starts after `last`. `more` is true when another entry was
--   seen or (conservatively) when the examination bound was hit.
-- Refusals: TENANT_NOT_FOUND.

if redis.call('EXISTS', KEYS[1]) == 0 then
  return fail('TENANT_NOT_FOUND', 'tenant ' .. ARGV[1] .. ' not found', {tenant_id = ARGV[1]})
end
local limit, scan = tonumber(ARGV[3]), tonumber(ARGV[6])
if not limit or limit < 1 or limit > 100 or not scan or scan < limit then
  return fail('INVALID_REQUEST', 'page size must be 1..100 and the scan bound at least the page size')
end
local min = '-'
if ARGV[2] ~= '' then min = '(' .. ARGV[2] end
local ids = redis.call('ZRANGEBYLEX', KEYS[2], min, '+', 'LIMIT', 0, scan)
local items, last, more = {}, '', (#ids == scan)
for i, id in ipairs(ids) do
  if #items == limit then
    more = true
    break
  end
  last = id
  local v = redis.call('HMGET', KEYS[3] .. id, 'key_id', 'tenant_id', 'name', 'status', 'created_at', 'revoked_at',
    'revoked_reason', 'permissions', 'expires_at', 'description', 'metadata', 'scope_filter', 'last_used_at')
  if v[1] then
    local keep = (ARGV[4] == '' or v[4] == ARGV[4])
    if keep and ARGV[5] ~= '' then
      keep = string.find(id, ARGV[5], 1, true) ~= nil or string.find(string.lower(v[3] or ''), ARGV[5], 1, true) ~= nil
    end
    if keep then
      items[#items + 1] = {key_id = v[1], tenant_id = v[2], name = v[3] or '', status = v[4],
        created_at = v[5] or '0', revoked_at = v[6] or '', revoked_reason = v[7] or '',
        permissions = v[8] or '', expires_at = v[9] or '', description = v[10] or '', metadata = v[11] or '',
        scope_filter = v[12] or '', last_used_at = v[13] or ''}
    end
  end
end
return ok({items = items, last = last, more = more})
