-- events/announce: put "tenant T has events up to id X" into the all-tenant
-- feed as exact, contiguous ranges (internal/events/doc.go, "The all-tenant feed").
--
-- KEYS: 1 feed_log        cy:{feed}:log (stream of {t, from, to})
--       2 feed_marks      cy:{feed}:marks (hash tenant -> last stream id already in the feed)
-- ARGV: 1 retention_ms    the feed is trimmed like the tenant streams
--       2.. tenant_event_pairs  tenant id, an id of that tenant's event stream
--                         (an entry that exists there; 'ms-seq')
--
-- For each pair whose id is after the tenant's mark M: XADD {t, from = M,
-- to = id} and set the mark to id. Every event of a tenant therefore lies in
-- exactly one feed range, and a tenant's ranges follow each other in feed
-- order, whatever order, repetition or staleness the announcements arrive
-- in (several cyclesd replicas, retries, the sweeper's reconciliation).
-- The first range of a tenant starts at '0-0'.
--
-- Result ok({now, appended, marks = [mark after this call, per pair]}).

local retention = tonumber(ARGV[1])
if not retention or retention <= 0 then
  return fail('INVALID_REQUEST', 'retention must be positive')
end
if #ARGV % 2 ~= 1 or #ARGV > 2001 then
  return fail('INVALID_REQUEST', 'announce takes 1..1000 tenant, id pairs')
end

-- parse_id returns the two decimal parts of a stream id, or nil.
local function parse_id(s)
  if type(s) ~= 'string' then return nil end
  local ms, seq = string.match(s, '^(%d+)%-(%d+)$')
  if not ms or #ms > 20 or #seq > 20 then return nil end
  return ms, seq
end

-- num_less compares two decimal strings without leading zeros issues.
local function num_less(a, b)
  a = string.gsub(a, '^0+(%d)', '%1')
  b = string.gsub(b, '^0+(%d)', '%1')
  if #a ~= #b then return #a < #b end
  return a < b
end

local function id_less(a, b)
  local ams, aseq = parse_id(a)
  local bms, bseq = parse_id(b)
  if ams ~= bms then return num_less(ams, bms) end
  return num_less(aseq, bseq)
end

for i = 2, #ARGV, 2 do
  local t, id = ARGV[i], ARGV[i + 1]
  if type(t) ~= 'string' or string.find(t, '^[a-z0-9_.-]+$') == nil or #t > 128 then
    return fail('INVALID_REQUEST', 'bad tenant id in announcement', {tenant_id = tostring(t)})
  end
  if not parse_id(id) then
    return fail('INVALID_REQUEST', 'bad stream id in announcement', {id = tostring(id)})
  end
end

local now = now_ms()
local minid = tostring(math.max(0, now - retention))
local appended, marks = 0, {}
for i = 2, #ARGV, 2 do
  local t, id = ARGV[i], ARGV[i + 1]
  local mark = redis.call('HGET', KEYS[2], t) or '0-0'
  if id_less(mark, id) then
    redis.call('XADD', KEYS[1], 'MINID', '~', minid, '*', 't', t, 'from', mark, 'to', id)
    redis.call('HSET', KEYS[2], t, id)
    appended = appended + 1
    mark = id
  end
  marks[#marks + 1] = mark
end
return ok({now = now, appended = appended, marks = marks})
