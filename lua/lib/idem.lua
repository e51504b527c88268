-- lib/idem.lua: the one idempotency record format of every idempotent
-- mutation (ledger, funding, operator repairs); docs/design.md#idempotency-records.
-- Included with "-- include: lib/idem.lua" (see internal/script).
--
-- A record is one Redis string, written with SET ... PX:
--   <kind><payload hash>:<body>
--   kind 'j': body is the stored answer (JSON bytes, replayed verbatim)
--   kind 'i': body is the id of what the first call created
--   kind 'p': body is that id without the id prefix its caller names
--             (reservation ids repeat the tenant the key already names)
-- The payload hash is internal/idempotency.PayloadHash (22 characters, never ':').
-- This is the only layout: the project was never released before it.
-- Library functions take keys and values as parameters (no KEYS/ARGV reads).

-- idem_check reads the record at key for a call with payload hash `hash`.
-- Returns nil when there is none; {id = ...} or {resp = ...} when it was made
-- by the same payload (id_prefix is put back in front of a 'p' id); or nil
-- and the script result to return: INTERNAL_ERROR for an unreadable record,
-- IDEMPOTENCY_MISMATCH (message mismatch_msg, details) for another payload.
local function idem_check(key, hash, mismatch_msg, details, id_prefix)
  local v = redis.call('GET', key)
  if not v then return nil end
  local kind, rec, same = string.sub(v, 1, 1), nil, false
  if kind == 'j' or kind == 'i' or kind == 'p' then
    local n = #hash
    same = string.sub(v, 2, n + 1) == hash and string.sub(v, n + 2, n + 2) == ':'
    local body = string.sub(v, n + 3)
    if kind == 'j' then rec = {resp = body}
    elseif kind == 'p' then rec = {id = (id_prefix or '') .. body}
    else rec = {id = body} end
  end
  if rec == nil then return nil, fail('INTERNAL_ERROR', 'idempotency record is malformed', details) end
  if not same then return nil, fail('IDEMPOTENCY_MISMATCH', mismatch_msg, details) end
  return rec
end

-- idem_put stores a record for ttl_ms: the answer resp (JSON) or, when resp
-- is nil, id (shortened by id_prefix when it starts with it).
local function idem_put(key, hash, ttl_ms, resp, id, id_prefix)
  local v
  if resp then
    v = 'j' .. hash .. ':' .. resp
  elseif id_prefix and string.sub(id, 1, #id_prefix) == id_prefix then
    v = 'p' .. hash .. ':' .. string.sub(id, #id_prefix + 1)
  else
    v = 'i' .. hash .. ':' .. id
  end
  redis.call('SET', key, v, 'PX', ttl_ms)
end
