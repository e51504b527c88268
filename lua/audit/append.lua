-- audit/append: append one audit entry written outside a mutating script: a
-- refusal (which changed nothing), or the success of an operation whose work
-- is not one script (sweeper controls and sweeps).
-- include: lib/audit.lua
--
-- KEYS: 1 audit_stream     audit stream (cy:{t:T}:audit, or cy:{audit}:log)
-- ARGV: 1 event_ctx        event context with its audit member (internal/eventctx.Arg)
-- Result: ok({id = <stream id of the entry>})
-- Refusals: INVALID_REQUEST (no audit member).

local c = cjson.decode(ARGV[1])
if type(c.audit) ~= 'table' then
  return fail('INVALID_REQUEST', 'the event context has no audit entry')
end
return ok({id = audit_append(KEYS[1], c, now_ms())})
