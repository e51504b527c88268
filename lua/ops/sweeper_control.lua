-- ops/sweeper_control: read, set or clear the sweeper pause flag shared by
-- every replica (OpsService.PauseSweeper/ResumeSweeper; the background loop
-- reads it before each sweep).
--
-- KEYS: 1 control   cy:ops:sweeper (hash: paused_at, reason)
-- ARGV: 1 op        'get' | 'pause' | 'resume'
--       2 reason    pause only, at most 256 bytes; validated by the caller
-- Result ok({paused, paused_at, reason, was_paused}); paused_at is Redis TIME
--   in ms (0 when not paused). A repeated pause keeps the first paused_at and
--   updates the reason.

local op = ARGV[1]
local cur = redis.call('HMGET', KEYS[1], 'paused_at', 'reason')
local was_paused = cur[1] ~= false and cur[1] ~= nil
if op == 'pause' then
  local at = cur[1]
  if not was_paused then at = string.format('%.0f', now_ms()) end
  redis.call('HSET', KEYS[1], 'paused_at', at, 'reason', ARGV[2] or '')
  return ok({paused = true, paused_at = tonumber(at), reason = ARGV[2] or '', was_paused = was_paused})
elseif op == 'resume' then
  redis.call('DEL', KEYS[1])
  return ok({paused = false, paused_at = 0, reason = '', was_paused = was_paused})
elseif op == 'get' then
  local at = 0
  if was_paused then at = tonumber(cur[1]) or 0 end
  return ok({paused = was_paused, paused_at = at, reason = cur[2] or '', was_paused = was_paused})
end
return fail('INVALID_REQUEST', 'unknown sweeper control operation')
