-- lib/admin_record.lua: the checks and merges the admin scripts that change a
-- stored tenant or budget share. Included with
-- "-- include: lib/admin_record.lua" (see internal/script).
-- Library functions take keys and values as parameters (no KEYS/ARGV reads).

-- open_budget returns the budget hash at budget_key and its balance (the
-- packed `bal` field, lib/core.lua BAL, split into {status, remaining,
-- reserved, spent, allocated, debt, overdraft_limit, over}), or nil and the
-- refusal: TENANT_CLOSED when the tenant record at tenant_key is closed,
-- BUDGET_NOT_FOUND when there is no budget, INTERNAL_ERROR when its balance
-- is absent or corrupt. details go with every refusal.
local function open_budget(tenant_key, budget_key, scope, unit, details)
  if redis.call('HGET', tenant_key, 'status') == 'CLOSED' then
    return nil, fail('TENANT_CLOSED', 'the tenant is closed', details)
  end
  local b = hgetall(budget_key)
  if next(b) == nil then
    return nil, fail('BUDGET_NOT_FOUND', 'budget ' .. scope .. ' ' .. unit .. ' not found', details)
  end
  local st, rem, res, spent, alloc, debt, lim, over = BAL.split(b.bal)
  if not st then return nil, fail('INTERNAL_ERROR', 'budget holds a malformed balance', details) end
  return b, {status = st, remaining = rem, reserved = res, spent = spent, allocated = alloc, debt = debt,
    overdraft_limit = lim, over = over}
end

-- merged_metadata applies a patch's metadata to the stored map stored_json
-- (a JSON object): the given entries are merged in, or replace the whole
-- map when replace is true. It returns the new map's JSON, or nil when the
-- result equals what is stored (nothing to write), and false when the
-- stored map is malformed.
local function merged_metadata(stored_json, given, replace)
  if type(given) ~= 'table' then given = {} end
  if not replace and next(given) == nil then return nil end
  local okd, old = pcall(cjson.decode, stored_json or '{}')
  if not okd or type(old) ~= 'table' then return false end
  local new = {}
  if not replace then
    for k, v in pairs(old) do new[k] = v end
  end
  for k, v in pairs(given) do new[k] = v end
  for k, v in pairs(new) do if old[k] ~= v then return cjson.encode(new) end end
  for k, _ in pairs(old) do if new[k] == nil then return cjson.encode(new) end end
  return nil
end

-- record_patch collects the changes to a stored record (a hash read into
-- stored): put(field, v) queues v when it is given and differs from
-- stored[field], and lists field in changed unless unlisted[field]; save(key)
-- writes the queued fields with updated_at (Redis TIME) in one HSET and
-- returns that time.
local function record_patch(stored, unlisted)
  local pt = {set = {}, changed = {}}
  function pt.put(field, v)
    if v ~= nil and stored[field] ~= v then
      pt.set[#pt.set + 1] = field
      pt.set[#pt.set + 1] = v
      if not (unlisted and unlisted[field]) then pt.changed[#pt.changed + 1] = field end
    end
  end
  function pt.save(key)
    local now = now_ms()
    pt.set[#pt.set + 1] = 'updated_at'
    pt.set[#pt.set + 1] = string.format('%.0f', now)
    redis.call('HSET', key, unpack(pt.set))
    return now
  end
  return pt
end
