#!lua flags=no-writes
-- ops/audit_records: audit one page of a tenant's reservation records (read-only).
-- include: lib/ops_hold.lua
--
-- KEYS: 1 tenant_prefix   "cy:{t:<tenant>}:"; the created index (prefix ..
--                         "r:created"), the deadline index ("r:deadline"), the
--                         quarantine index ("r:quarantine") and the records
--                         ("r:<id>") are derived from it
-- ARGV: 1 cursor_member   '' = start
--       2 cursor_score
--       3 page_size       1..1000
-- Refusals: INVALID_REQUEST; TENANT_NOT_FOUND (first page: the tenant has no record)
-- JSON ops/audit_records: rows[]{kind id msg ev fix} next{member score} done
--   records active quarantined holds uncertain all_uncertain
-- Result ok(): the page's findings and counts; holds = {member -> sum of this
-- page's ACTIVE estimates on it}, uncertain = {member -> true} (a holder whose
-- estimate does not parse, or a quarantined record in an invalid state). The
-- holds are partial sums; the caller adds the pages up (internal/ledgerops)
-- and confirms any mismatch with reserved inside one script (ops/holds).
-- Kinds (docs/operations-runbook.md):
--   INVALID_RECORD          ACTIVE, not quarantined, and the sweeper could not expire it
--   ACTIVE_NOT_INDEXED      ACTIVE, not quarantined, missing from the deadline index (fix: ZADD)
--   DEADLINE_SCORE_MISMATCH index score != expires_at + grace_ms (fix: ZADD)
--   QUARANTINED             flagged by the sweeper; resolve with ResolveQuarantined
--   QUARANTINE_NOT_INDEXED  flagged but not in the quarantine index (fix: ZADD)
--   TERMINAL_NO_TTL         COMMITTED/RELEASED/EXPIRED kept without a TTL (fix: PEXPIRE)

local prefix = KEYS[1]
local created, dl, qi = key_index(prefix, 'created'), key_index(prefix, 'deadline'), key_index(prefix, 'quarantine')
local n = tonumber(ARGV[3])
if not n or n < 1 or n > 1000 then return fail('INVALID_REQUEST', 'page size must be 1..1000') end
if ARGV[1] == '' then
  local missing = missing_tenant(prefix)
  if missing then return missing end
end

local rows = {}
local function row(kind, id, msg, ev, fix)
  rows[#rows + 1] = {kind = kind, id = id, msg = msg, ev = ev or {}, fix = fix or false}
end

local page, done = zpage(created, ARGV[1], ARGV[2], n)
local records, active, quarantined = 0, 0, 0
local holds, uncertain, all_uncertain = {}, {}, false
-- hold adds what h holds to this page's partial sums (h parsed).
local function hold(h, counted)
  if not (h.scopes and h.unit_ok) then
    all_uncertain = true
    return
  end
  for _, s in ipairs(h.scopes) do
    local m = s .. '|' .. h.unit
    local sum = nil
    if counted and h.E then sum = i64_add(holds[m] or '0', h.E) end
    if sum == nil then uncertain[m] = true else holds[m] = sum end
  end
end
for _, e in ipairs(page) do
  local id = e[1]
  local h = read_hold(prefix, id)
  if h.wrong_type then
    records = records + 1
    row('INVALID_RECORD', id, 'reservation key is not a hash', {reason = 'WRONG_TYPE'})
  elseif not h.missing then
    records = records + 1
    local st = h.state
    if is_quarantined(h) and st ~= 'ACTIVE' then
      quarantined = quarantined + 1
      parse_hold(h)
      hold(h, false)
      row('QUARANTINED', id, 'quarantined by the sweeper: ' .. (h.quarantine_reason or ''), {
        reason = h.quarantine_reason or '', quarantined_at = h.quarantined_at, state = st or ''})
      if not redis.call('ZSCORE', qi, id) then
        row('QUARANTINE_NOT_INDEXED', id, 'quarantined record missing from the quarantine index',
          {quarantined_at = h.quarantined_at}, true)
      end
    elseif st == 'ACTIVE' then
      active = active + 1
      local hold_problem, expiry_problem = parse_hold(h)
      hold(h, true)
      if h.quarantined_at then
        quarantined = quarantined + 1
        row('QUARANTINED', id, 'quarantined by the sweeper: ' .. (h.quarantine_reason or ''), {
          reason = h.quarantine_reason or '', quarantined_at = h.quarantined_at,
          estimate = h.estimate or '', unit = h.unit or '', budgeted = h.scopes and cjson.encode(h.scopes) or h.budgeted or ''})
        if not redis.call('ZSCORE', qi, id) then
          row('QUARANTINE_NOT_INDEXED', id, 'quarantined record missing from the quarantine index',
            {quarantined_at = h.quarantined_at}, true)
        end
      else
        local problem = hold_problem or expiry_problem
        if problem then
          row('INVALID_RECORD', id, 'ACTIVE record the sweeper cannot expire: ' .. problem, {
            reason = problem, estimate = h.estimate or '', unit = h.unit or '', budgeted = h.scopes and cjson.encode(h.scopes) or h.budgeted or '',
            expires_at = h.expires_at or '', grace_ms = h.grace_ms or ''})
        end
        local score = redis.call('ZSCORE', dl, id)
        if not score then
          row('ACTIVE_NOT_INDEXED', id, 'ACTIVE record missing from the deadline index: it would never expire',
            {expires_at = h.expires_at or '', grace_ms = h.grace_ms or ''}, h.deadline ~= nil)
        elseif h.deadline and tonumber(score) ~= h.deadline then
          row('DEADLINE_SCORE_MISMATCH', id, 'deadline index score differs from expires_at + grace_ms',
            {score = score, expected = string.format('%.0f', h.deadline)}, true)
        end
      end
    elseif TERMINAL_STATES[st or ''] then
      if redis.call('PTTL', h.key) == -1 then
        row('TERMINAL_NO_TTL', id, st .. ' record kept without a TTL', {state = st,
          finalized_at = h.finalized_at or h.expired_at or ''}, true)
      end
    else
      row('INVALID_RECORD', id, 'record has an invalid state', {reason = 'INVALID_STATE', state = st or ''})
    end
  end
end
local nxt = {member = '', score = ''}
if #page > 0 then nxt = {member = page[#page][1], score = page[#page][2]} end
return ok({rows = rows, next = nxt, done = done, records = records, active = active, quarantined = quarantined,
  holds = holds, uncertain = uncertain, all_uncertain = all_uncertain})
