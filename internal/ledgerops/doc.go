// Package ledgerops gives operators the tools to check and mend a tenant's
// ledger without touching Redis by hand (OpsService; runbook in
// docs/operations-runbook.md):
//
//   - Audit (read-only): per budget and unit, reserved against the sum of the
//     ACTIVE holds; remaining = allocated - spent - reserved - debt (the
//     identity internal/keys/records.go defines); deadline index <-> ACTIVE records
//     in both directions; terminal records without their TTL; quarantined
//     records. Every script call is bounded (a page of records, index entries
//     or budgets), so it is safe on a large tenant, and every script touches
//     one tenant's slot, so it runs on Cluster. Holds are summed page by
//     page; a budget whose reserved disagrees is only a suspect (live traffic
//     moves between pages), re-read in a second paged pass, and one that
//     disagrees again by the same amount is confirmed inside one script
//     (lua/ops/holds.lua) that reads reserved and every holder at one instant.
//     A clean audit never runs that script.
//   - Repair: the provably safe fixes, re-checked and applied in one script
//     (lua/ops/repair.lua), or reported by a dry run (the default) without a
//     write. It never writes allocated, spent or debt.
//   - Quarantine: list the reservations the sweeper quarantined, and resolve
//     one (release with chosen amounts, expire without a refund, or requeue
//     after corrections) in one script, idempotently, with one event.
//   - A background auditor (Options.AuditInterval, off by default) that walks
//     every tenant at a bounded rate and exports cycles_audit_discrepancies{kind}.
//
// Every mutation is one Lua script in the tenant's slot, idempotent by key
// (the response is stored beside the tenant and replayed), and audited in the
// tenant's event stream with the caller as actor (admin).
package ledgerops
