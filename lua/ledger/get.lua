#!lua flags=no-writes
-- ledger/get: read one reservation of the caller's tenant (docs/protocol.md#reads).
-- include: lib/ledger_util.lua lib/ledger_record.lua
-- Keys are per tenant: another tenant's id is answered before this script
-- (FORBIDDEN or NOT_FOUND, see internal/api/runtimeapi and internal/ledger ids.go).
--
-- KEYS: 1 reservation hash
-- ARGV: (none)
-- Result: ok({rec = {<field> = <value>, ...}}) with the RECORD_FIELDS present.
-- Refusals: NOT_FOUND (never existed or purged after retention),
--   RESERVATION_EXPIRED (state EXPIRED, docs/protocol.md#reads).

local rec = read_record(KEYS[1], #RECORD_FIELDS)
if rec == nil then return fail('NOT_FOUND', 'reservation not found') end
if rec.state == 'EXPIRED' then
  return fail('RESERVATION_EXPIRED', 'reservation expired', {reservation_id = rec.id or ''})
end
return ok({rec = rec})
