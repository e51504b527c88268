#!lua flags=no-writes
-- archive/clock: Redis TIME for the archive's day-partition upkeep (which
-- days to create ahead, which whole days are past -archive-retention), so
-- the archive follows the ledger's one clock, not a replica's.
--
-- KEYS: none
-- ARGV: none
-- Result ok({now_ms}) Redis TIME in ms. No refusals.

return ok({now_ms = now_ms()})
