-- lib/ledger_util.lua: JSON decoding, number formatting and the refusal helper shared by the ledger scripts.
-- Included by ledger scripts with "-- include: lib/ledger_util.lua" (see internal/script).

local DAY_MS = 86400000
-- RETENTION_MS: a terminal record's retention (30 days) as the string PEXPIRE
-- takes: written once here, not formatted on every settlement (a
-- number->string conversion costs Redis ~3k instructions).
local RETENTION_MS = '2592000000'
local POLICIES = {REJECT = true, ALLOW_IF_AVAILABLE = true, ALLOW_WITH_OVERDRAFT = true}

-- jdecode decodes a JSON object/array; nil when absent or malformed (cjson
-- raises on bad input in Redis but returns nil, err on the embedded store).
local function jdecode(s)
  if s == nil or s == false or s == '' then return nil end
  local good, v = pcall(cjson.decode, s)
  if good and type(v) == 'table' then return v end
  return nil
end

-- ms formats a time or duration (plain Lua number, an integer < 2^53) as a
-- decimal string (%d: integer formatting, far cheaper than %.0f).
local function ms(n) return string.format('%d', n) end

-- amount_arg normalizes the money amount v (a decimal int64 string), or
-- returns nil and the INVALID_REQUEST refusal naming field when it is not an
-- integer in 0..2^63-1.
local function amount_arg(v, field)
  local a = i64_norm(v)
  -- Canonical: negative exactly when it starts with '-' (no conversion).
  if a == nil or string.byte(a, 1) == 45 then
    return nil, fail('INVALID_REQUEST', field .. ' must be an integer in 0..2^63-1', {field = field})
  end
  return a
end

-- small_int parses a non-negative integer field that is not money (times,
-- durations, counters); nil when malformed.
local function small_int(s)
  if s == nil or s == false or not string.find(s, '^%d+$') or #s > 15 then return nil end
  return s + 0 -- digits only: arithmetic converts once, tonumber() twice
end
