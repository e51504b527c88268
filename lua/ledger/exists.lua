#!lua flags=no-writes
-- ledger/exists: whether a reservation record exists (any state), for the
-- owner check of docs/protocol.md#reads. Read-only.
--
-- KEYS: 1 reservation   the reservation hash
-- ARGV: none
-- Result: ok({exists = bool})

return ok({exists = redis.call('EXISTS', KEYS[1]) == 1})
