-- lib/policy_rate.lua: the v0.1.25 policy rate limits
-- (rate_limits.max_reservations_per_minute, max_commits_per_minute;
-- docs/protocol.md#policy-rate-limits), enforced by the reserve, decide and
-- commit scripts in the same run as the change they govern.
-- Included by lib/policy.lua (its compile writes the tables below).
-- include: lib/keys.lua
--
-- Compiled at policy write time, beside the match table (lib/policy.lua), into
-- two fields of the tenant record, each absent when no ACTIVE policy sets that
-- limit, so a tenant without rate limits reads one more absent field in the
-- tenant HMGET and nothing else:
--   prr  the policies that set max_reservations_per_minute,
--   prc  those that set max_commits_per_minute,
-- one line each, in evaluation order (priority descending, then created_at,
-- then id: lib/policy.lua's order):
--   <Lua pattern> TAB <limit> TAB <from ms>,<until ms (0 = none)> TAB <policy id> LF
-- Precedence per field, as for every other policy term: the limit is the first
-- line whose pattern matches the scope path and whose effective window holds
-- Redis TIME.
--
-- Counting: "per scope" is the concrete scope path the policy matched (the
-- reservation's scope path; a commit counts at its reservation's). Windows are
-- the UTC minutes of Redis TIME: one hash per tenant and minute
-- (key_policy_rate: <prefix>rl:<minute number>, the tenant's hash slot), field
-- '<what>|<scope path>' (what: 'r' reserve, 'c' commit) holding the calls
-- admitted in that minute. The hash expires at the minute's end (PEXPIREAT,
-- set by the first count of a field), so a window never outlives itself and
-- an earlier minute is never read again. Only a call the script admits counts;
-- a refused call (by the limit or by anything else) writes nothing.

-- policy_rate is the library as one table (one top-level local: the reserve
-- script is near Lua's limit of locals per function).
local policy_rate = {WINDOW_MS = 60000, BAD = 'the tenant record has malformed compiled rate limits',
  NAME = {r = 'max_reservations_per_minute', c = 'max_commits_per_minute'}, NOUN = {r = 'reservations', c = 'commits'}}

-- policy_rate.compile returns the prr and prc tables ('' when empty) of the ACTIVE
-- policies in list, already in evaluation order (policy_compile).
function policy_rate.compile(list)
  local res, com = {}, {}
  for _, p in ipairs(list) do
    local tail = string.format('\t%d,%d\t', p.effective_from_ms or 0, p.effective_until_ms or 0) .. p.policy_id .. '\n'
    local r, c = p.max_reservations_per_minute or 0, p.max_commits_per_minute or 0
    if r > 0 then res[#res + 1] = p.lua_pattern .. string.format('\t%d', r) .. tail end
    if c > 0 then com[#com + 1] = p.lua_pattern .. string.format('\t%d', c) .. tail end
  end
  return table.concat(res), table.concat(com)
end

-- policy_rate.limit is the limit (number) and policy id that govern scope_path at
-- now in the compiled table; nil when none; nil, nil, message when malformed.
function policy_rate.limit(compiled, scope_path, now)
  for line in string.gmatch(compiled, '[^\n]+') do
    local pat, lim, from, till, id = string.match(line, '^([^\t]+)\t(%d+)\t(%d+),(%d+)\t(.+)$')
    if pat == nil then return nil, nil, policy_rate.BAD end
    if string.find(scope_path, pat) then
      local f, u = tonumber(from), tonumber(till)
      if now >= f and (u == 0 or now < u) then return tonumber(lim), id end
    end
  end
  return nil
end

-- policy_rate.gate reads the counter a call of kind what ('r' | 'c') at
-- scope_path must stay under, from the compiled table (conf.prr / conf.prc).
-- Returns nil when no limit governs the call; {err = message} when the table
-- is malformed (the caller fails closed: INTERNAL_ERROR); else a gate {key,
-- field, used, limit, pol, scope, what, reset (the window's end, ms), retry
-- (ms to it), full (the limit is reached: the call must be refused)}.
function policy_rate.gate(prefix, what, compiled, scope_path, now)
  if compiled == nil or compiled == '' then return nil end
  local lim, id, err = policy_rate.limit(compiled, scope_path, now)
  if err then return {err = err} end
  if lim == nil then return nil end
  local minute = math.floor(now / policy_rate.WINDOW_MS)
  local key = key_policy_rate(prefix, string.format('%d', minute))
  local field = what .. '|' .. scope_path
  local used = tonumber(redis.call('HGET', key, field) or '0') or 0
  local reset = (minute + 1) * policy_rate.WINDOW_MS
  return {key = key, field = field, used = used, limit = lim, pol = id, scope = scope_path, what = what,
    reset = reset, retry = reset - now, full = used >= lim}
end

-- policy_rate.count counts an admitted call against its gate (same run as the change).
function policy_rate.count(g)
  if redis.call('HINCRBY', g.key, g.field, 1) == 1 then redis.call('PEXPIREAT', g.key, g.reset) end
end

-- policy_rate.refusal is the LIMIT_EXCEEDED refusal of a full gate (live calls):
-- 429 / RESOURCE_EXHAUSTED, retryable when the minute turns (retry_after_ms
-- becomes RetryInfo and Retry-After in internal/apierr).
function policy_rate.refusal(g)
  return fail('LIMIT_EXCEEDED', string.format('policy %s allows %d %s per minute at %s', g.pol, g.limit,
    policy_rate.NOUN[g.what], g.scope), {scope = g.scope, policy_id = g.pol, limit = string.format('%d', g.limit),
    rate_limit = policy_rate.NAME[g.what], window = 'per_minute', reset_at_ms = string.format('%d', g.reset),
    retry_after_ms = string.format('%d', g.retry)})
end

-- policy_rate.deny is the DenyDetail of a full gate where the call evaluates instead
-- of acting (dry run, observe mode, decide): a DENY with reason LIMIT_EXCEEDED.
function policy_rate.deny(g)
  return {reason_code = 'LIMIT_EXCEEDED', blocked_by_scope = g.scope, blocked_by_policy = g.pol,
    suggested_fix = string.format('Wait for the next minute or raise rate_limits.%s (%d) in policy %s',
      policy_rate.NAME[g.what], g.limit, g.pol)}
end
