#!lua flags=no-writes
-- ops/holds: the sum of ACTIVE holds per budget beside the budgets' reserved,
-- read in one script so both come from one instant (read-only).
-- include: lib/ops_hold.lua
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:"; the indexes, records and budget
--                         hashes are derived from it
-- ARGV: 1 limit           most reservation ids to read (bounded work)
--       2 extra_ids       JSON array of extra ids (ACTIVE records outside both indexes)
--       3 members         JSON array of budget members "<scope_path>|<UNIT>"
--                         whose reserved to return
-- Result ok(): sums = {member -> E}, uncertain = {member -> true},
-- quarantined = {member -> id}, reserved = {member -> stored string}; only
-- over_limit when more than limit records are active.
-- JSON ops/holds: over_limit sums uncertain quarantined all_uncertain active reserved

local prefix = KEYS[1]
local limit = tonumber(ARGV[1])
if not limit or limit < 1 then return fail('INVALID_REQUEST', 'limit must be positive') end
local okx, extra = pcall(cjson.decode, ARGV[2])
local okm, members = pcall(cjson.decode, ARGV[3])
if not okx or type(extra) ~= 'table' or not okm or type(members) ~= 'table' then
  return fail('INVALID_REQUEST', 'malformed id or member list')
end
local holds = active_holds(prefix, limit, extra)
if holds == nil then return ok({over_limit = true}) end
local reserved = {}
for _, m in ipairs(members) do
  local bar = string.find(m, '|[^|]*$')
  if bar then
    local p = BAL.parts(redis.pcall('HGET', key_budget(prefix, string.sub(m, 1, bar - 1), string.sub(m, bar + 1)), 'bal'))
    if p then reserved[m] = p[3] end
  end
end
return ok({over_limit = false, sums = holds.sums, uncertain = holds.uncertain, quarantined = holds.quarantined,
  all_uncertain = holds.all_uncertain, active = holds.active, reserved = reserved})
