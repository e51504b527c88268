-- bulk/remember: the idempotency record of a bulk action: its whole answer,
-- kept for the replay window (lib/idem.lua's record format).
-- include: lib/idem.lua
--
-- KEYS: 1 record           the record (cy:{bulk}:tenants:<key>, or cy:{t:T}:idem:bulk:<key>)
-- ARGV: 1 mode             'get' | 'put'
--       2 payload_hash     payload hash (internal/idempotency.PayloadHash of the request)
--       3 answer           the answer (JSON; put only)
--       4 lifetime_ms      record lifetime in ms (put only)
-- Result: ok({resp = <the stored answer, '' when none>}). A put under a key
--   already holding an answer for the same payload returns that answer and
--   writes nothing (a concurrent twin stored first).
-- Refusals: IDEMPOTENCY_MISMATCH (the key was used with another request),
--   INTERNAL_ERROR (malformed record), INVALID_REQUEST (bad mode or lifetime).

local details = {field = 'idempotency_key'}
local rec, refusal = idem_check(KEYS[1], ARGV[2], 'idempotency key already used with a different bulk action', details)
if refusal then return refusal end
if rec and not rec.resp then return fail('INTERNAL_ERROR', 'idempotency record is malformed', details) end
if rec then return ok({resp = rec.resp}) end
if ARGV[1] == 'get' then return ok({resp = ''}) end
if ARGV[1] ~= 'put' then return fail('INVALID_REQUEST', 'mode must be get or put') end
local ttl = tonumber(ARGV[4])
if not ttl or ttl < 1 then return fail('INVALID_REQUEST', 'record lifetime must be positive') end
idem_put(KEYS[1], ARGV[2], string.format('%.0f', ttl), ARGV[3])
return ok({resp = ARGV[3]})
