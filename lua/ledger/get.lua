#!lua flags=no-writes
-- ledger/get: read one reservation of the caller's tenant (docs/protocol.md#reads).
-- include: lib/ledger_util.lua lib/ledger_record.lua
-- Keys are per tenant: another tenant's id is answered before this script
-- (FORBIDDEN or NOT_FOUND, see internal/api/runtimeapi and internal/ledger ids.go).
--
-- KEYS: 1 reservation      the reservation hash
-- ARGV: 1.. archived_pairs  none, or an archived record's fields as field/value
--                          pairs (at most 128 pairs): a reservation past the hot
--                          window, read from the PostgreSQL archive
--                          (internal/archiver RecordOf). It is then answered from
--                          them exactly as from the hash, which is not read.
-- Result: ok({rec = {<field> = <value>, ...}}) with the RECORD_FIELDS present.
-- Refusals: NOT_FOUND (never existed or purged after retention),
--   INVALID_REQUEST (odd or too many archived pairs),
--   RESERVATION_EXPIRED (state EXPIRED, docs/protocol.md#reads).

local rec
if #ARGV > 0 then
  if #ARGV % 2 ~= 0 or #ARGV > 256 then return fail('INVALID_REQUEST', 'archived record: field/value pairs') end
  local f = {}
  for i = 1, #ARGV, 2 do f[ARGV[i]] = ARGV[i + 1] end
  if f.id or f.state then
    rec = {}
    for _, name in ipairs(RECORD_FIELDS) do rec[name] = f[name] end
    if not rec.id then rec.id = string.match(KEYS[1], 'r:([^:]*)$') end
  end
else
  rec = read_record(KEYS[1], #RECORD_FIELDS)
end
if rec == nil then return fail('NOT_FOUND', 'reservation not found') end
if rec.state == 'EXPIRED' then
  return fail('RESERVATION_EXPIRED', 'reservation expired', {reservation_id = rec.id or ''})
end
return ok({rec = rec})
