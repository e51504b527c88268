#!lua flags=no-writes
-- ratelimit/policy_list: every rate-limit policy.
--
-- KEYS: 1 policies     cy:rl:policies
-- ARGV: none
-- Result   {'OK', '[<policy JSON>, ...]'} (a JSON array, '[]' when empty)
-- Bounded by the policy count limit enforced by ratelimit/policy_put.

local vals = redis.call('HVALS', KEYS[1])
return {'OK', '[' .. table.concat(vals, ',') .. ']'}
