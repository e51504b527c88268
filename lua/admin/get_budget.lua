#!lua flags=no-writes
-- admin/get_budget: read one budget hash.
--
-- KEYS: 1 budget       budget hash
-- ARGV: 1 scope_path   for the refusal
--       2 unit         for the refusal
-- Result: ok(<budget hash>)
-- JSON admin/get_budget: {*}
-- Refusals: BUDGET_NOT_FOUND.

local b = hgetall(KEYS[1])
if next(b) == nil then
  return fail('BUDGET_NOT_FOUND', 'budget ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' not found',
    {scope = ARGV[1], unit = ARGV[2]})
end
return ok(b)
