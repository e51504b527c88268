-- lib/ledger_record.lua: projecting a reservation record for reads (get, list).
-- Included by ledger scripts with "-- include: lib/ledger_record.lua" (see internal/script).

-- RECORD_FIELDS are the reservation fields a read returns (no replay
-- snapshots, no idempotency hashes).
local RECORD_FIELDS = {'id', 'state', 'unit', 'estimate', 'scope_path', 'affected', 'budgeted',
  'created_at', 'expires_at', 'grace_ms', 'policy', 'max_ext', 'ext_count', 'idem_key', 'subject',
  'action', 'charged', 'debt_incurred', 'finalized_at', 'expired_at', 'metadata', 'committed_metadata'}

-- read_record returns the record's RECORD_FIELDS (first n of them), or nil
-- when the record does not exist. The id comes from the key when the record
-- does not store it (docs/design.md#reservation-records); budgeted and subject
-- are returned as stored (internal/ledger decodes the compact forms).
local function read_record(key, n)
  local fields = {}
  for i = 1, n do fields[i] = RECORD_FIELDS[i] end
  local v = redis.call('HMGET', key, unpack(fields))
  if not v[1] and not v[2] then return nil end
  local rec = {}
  for i = 1, n do
    if v[i] then rec[fields[i]] = v[i] end
  end
  if not rec.id then rec.id = string.match(key, 'r:([^:]*)$') end
  return rec
end
