-- ratelimit/policy_delete: delete one rate-limit policy. Its keys' state is
-- not scanned for (no SCAN in scripts); it expires within window + slack.
--
-- KEYS: 1 policies     cy:rl:policies
-- ARGV: 1 name         policy name
-- Result   ok({deleted = true})
-- Refusal  POLICY_NOT_FOUND (nothing changed)

if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return fail('POLICY_NOT_FOUND', 'no policy ' .. ARGV[1], {policy = ARGV[1]})
end
return ok({deleted = true})
