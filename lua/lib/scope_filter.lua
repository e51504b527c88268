-- lib/scope_filter.lua: an API key's scope_filter checked on a reservation's
-- scope by the script that settles it (commit, release, extend), before any
-- write: a request naming a reservation by id names a scope only the record
-- knows. The definition is internal/scopefilter (Allows): the filter passes
-- when one pattern's every "<level>:<value>" segment is in the scope path
-- ("*": any value of that level). Patterns arrive canonical, joined by ','
-- (scopefilter.ScriptArg); '' means no filter.
-- Library functions take keys and values as parameters (no KEYS/ARGV reads).

-- scope_filter_refusal returns the FORBIDDEN refusal when filter does not
-- cover path (the record's scope_path), else nil. Bounded: a filter holds
-- at most 32 patterns of at most 6 segments.
local function scope_filter_refusal(filter, path)
  if filter == nil or filter == '' then return nil end
  path = path or ''
  local have = {}
  for seg in string.gmatch(path, '[^/]+') do
    local level, value = string.match(seg, '^([^:]+):(.+)$')
    if level then have[level] = value end
  end
  for pattern in string.gmatch(filter, '[^,]+') do
    local covered = true
    for seg in string.gmatch(pattern, '[^/]+') do
      local level, value = string.match(seg, '^([^:]+):(.+)$')
      local v = level and have[level]
      if v == nil or (value ~= '*' and value ~= v) then
        covered = false
        break
      end
    end
    if covered then return nil end
  end
  return fail('FORBIDDEN', 'scope ' .. path .. " is outside this API key's scope_filter",
    {reason = 'scope_filter', field = 'reservation_id', scope = path})
end
