-- lib/ledger_release.lua: returning a reservation's hold to its budgeted scopes.
-- Included by ledger scripts with "-- include: lib/ledger_release.lua" (see internal/script).
-- include: lib/ledger_reservation.lua lib/refund.lua

-- release_hold returns a reservation's estimate to every budget of its
-- snapshot (reserved -= E, remaining += E), overflow-checked before the first
-- write, and gives back its per_run quota counts (lib/refund.lua quota_refund).
-- Returns the budgets touched, or nil, code, message.
local function release_hold(prefix, r)
  local bs, err = reservation_budgets(prefix, r)
  if bs == nil then return nil, 'INTERNAL_ERROR', err end
  -- Budgets were validated whole by load_budget; reserved may go below zero
  -- (no underflow guard: a release never fails on what others did).
  for _, b in ipairs(bs) do
    local done, problem = refund_step(b, r.E, false)
    if not done then return nil, problem, 'releasing would overflow int64 at ' .. b.path end
  end
  refund_apply(bs)
  quota_refund(r.qrun)
  return bs
end
