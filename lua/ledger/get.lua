-- ledger/get: read one reservation of the caller's tenant (PROTOCOL.md §b.6).
-- Keys are per tenant, so another tenant's id is simply NOT_FOUND here: the
-- caller learns nothing about ids outside its own tenant.
--
-- KEYS: 1 reservation hash
-- ARGV: (none)
-- Result: ok({rec = {<field> = <value>, ...}}) with the RECORD_FIELDS present.
-- Refusals: NOT_FOUND (never existed or purged after retention),
--   RESERVATION_EXPIRED (state EXPIRED, §b.6).

-- <shared:util>
local DAY_MS = 86400000
local RETENTION_MS = 30 * DAY_MS
local POLICIES = {REJECT = true, ALLOW_IF_AVAILABLE = true, ALLOW_WITH_OVERDRAFT = true}

-- jdecode decodes a JSON object/array; nil when absent or malformed (cjson
-- raises on bad input in Redis but returns nil, err on the embedded store).
local function jdecode(s)
  if s == nil or s == false or s == '' then return nil end
  local good, v = pcall(cjson.decode, s)
  if good and type(v) == 'table' then return v end
  return nil
end

-- ms formats a time or duration (plain Lua number, < 2^53) as a decimal string.
local function ms(n) return string.format('%.0f', n) end

-- small_int parses a non-negative integer field that is not money (times,
-- durations, counters); nil when malformed.
local function small_int(s)
  if s == nil or s == false or not string.match(s, '^%d+$') or #s > 15 then return nil end
  return tonumber(s)
end
-- </shared:util>

-- <shared:record>
-- RECORD_FIELDS are the reservation fields a read returns (no replay
-- snapshots, no idempotency hashes).
local RECORD_FIELDS = {'id', 'state', 'unit', 'estimate', 'scope_path', 'affected', 'budgeted',
  'created_at', 'expires_at', 'grace_ms', 'policy', 'max_ext', 'ext_count', 'idem_key', 'subject',
  'action', 'charged', 'debt_incurred', 'finalized_at', 'expired_at', 'metadata', 'committed_metadata'}

-- read_record returns the record's RECORD_FIELDS (first n of them), or nil
-- when the record does not exist.
local function read_record(key, n)
  local fields = {}
  for i = 1, n do fields[i] = RECORD_FIELDS[i] end
  local v = redis.call('HMGET', key, unpack(fields))
  if not v[1] and not v[2] then return nil end
  local rec = {}
  for i = 1, n do
    if v[i] then rec[fields[i]] = v[i] end
  end
  return rec
end
-- </shared:record>

local rec = read_record(KEYS[1], #RECORD_FIELDS)
if rec == nil then return fail('NOT_FOUND', 'reservation not found') end
if rec.state == 'EXPIRED' then
  return fail('RESERVATION_EXPIRED', 'reservation expired', {reservation_id = rec.id or ''})
end
return ok({rec = rec})
