package keys

import "strings"

// RecordField is one field of a record layout.
type RecordField struct {
	// Name is the hash field; a family of numbered fields is written
	// "<tag><i>" (rb<i>: rb1, rb2, ...).
	Name string
	// Set says which call writes it (and when it is left out).
	Set string
	// Holds says what it holds.
	Holds string
	// Read is how the reads (lua/lib/ledger_record.lua RECORD_FIELDS,
	// internal/ledger's record) return it.
	Read ReadMode
}

// ReadMode is how a field reaches the reads.
type ReadMode uint8

const (
	// NotRead: replays, settlement and operators use it; reads do not return it.
	NotRead ReadMode = iota
	// Read: every get and list returns it.
	Read
	// ReadOnRequest: get returns it, list only when asked to include it.
	ReadOnRequest
)

// ReservationLayout is the reservation hash (Tenant.Reservation): its one
// definition. The Lua library that writes and reads it declares the same
// names in the same order (lua/lib/record_layout.lua "-- RECORD
// reservation:", TestReservationLayoutMatchesLua), the reads' field list
// follows it (RECORD_FIELDS in lua/lib/ledger_record.lua, internal/ledger's
// record), docs/design.md's table is generated from it
// (TestDesignDocRecordTable), and after every scenario of the ledger suites
// test/ledgertest refuses a record holding a field it does not list.
//
// Amounts are canonical decimal strings (int64), times integer milliseconds
// from Redis TIME, enums the proto value names without their prefix. Every
// value of a typical record is at most 64 bytes, so the hash stays
// listpack-encoded (docs/design.md#reservation-records). No id (the key
// names it). This is the first released layout; no reader knows another.
var ReservationLayout = []RecordField{
	{"state", "reserve; settlement", "`ACTIVE`, `COMMITTED`, `RELEASED` or `EXPIRED`", Read},
	{"unit", "reserve", "the unit (`TOKENS`, ...)", Read},
	{"estimate", "reserve", "the amount held", Read},
	{"scope_path", "reserve", "the reservation's scope path", Read},
	{"affected", "reserve, only when the affected scopes are not the scope path's prefixes (they always are through the API)",
		"a JSON array of scope paths; readers derive the prefixes otherwise", Read},
	{"budgeted", "reserve; an operator requeue", "one digit per budgeted scope, its 1-based position among the prefixes of `scope_path` (`123` = every level of a 3-level path), or a JSON array of scope paths when the list is not such a subsequence (BudgetedScopes)", Read},
	{"created_at", "reserve", "Redis TIME at the reserve", Read},
	{"expires_at", "reserve; extend", "the expiry", Read},
	{"grace_ms", "reserve", "the grace period after the expiry", Read},
	{"policy", "reserve", "the resolved commit overage policy", Read},
	{"max_ext", "reserve", "the tenant's extension cap at the reserve", Read},
	{"ext_count", "extend, only when not 0", "extensions made", Read},
	{"idem_key", "reserve", "the reserve's idempotency key", Read},
	{"subject", "reserve, only when the scope path does not imply it", "the subject JSON; one naming exactly the path's levels is left out and rebuilt from `scope_path` (ImpliedSubject)", Read},
	{"action", "reserve", "the action JSON", Read},
	{"charged", "commit", "the amount charged", Read},
	{"debt_incurred", "commit, only when not 0", "the debt the commit incurred", Read},
	{"finalized_at", "commit; release", "Redis TIME at the settlement", Read},
	{"expired_at", "expiry", "Redis TIME at the expiry", Read},
	{"metadata", "reserve, only when set", "the reserve's metadata JSON", ReadOnRequest},
	{"committed_metadata", "commit, only when set", "the commit's metadata JSON", ReadOnRequest},
	{"rb<i>", "reserve", "the reserve answer's balance of the `i`-th budgeted scope: `remaining,reserved,spent,allocated[,debt[,overdraft_limit[,over]]]`, trailing fields left out while 0 (`over` 1 = over limit); one field per scope keeps each under 64 bytes", NotRead},
	{"caps", "reserve, only when the budget had caps", "the reserve answer's caps", NotRead},
	{"qrun", "reserve, only when per-run quotas counted it", "the per-run quota counter keys to give back on release or expiry (JSON array, lib/quota.lua)", NotRead},
	{"exp0", "the first extend", "the expiry the reserve answered (its replay answers with it)", NotRead},
	{"extend_metadata", "extend, only when set", "the last extension's metadata JSON", NotRead},
	{"commit_key", "commit", "the commit's idempotency key", NotRead},
	{"commit_hash", "commit", "the commit's payload hash", NotRead},
	{"cb<i>", "commit", "the commit answer's balances, as `rb<i>`", NotRead},
	{"metrics", "commit, only when set", "the commit's metrics JSON", NotRead},
	{"release_key", "release", "the release's idempotency key", NotRead},
	{"release_hash", "release", "the release's payload hash", NotRead},
	{"release_reason", "release; tenant closure; an operator", "the reason (`tenant_closed`, `operator: ...`)", NotRead},
	{"lb<i>", "release (not a tenant-closure release, which has no key to replay)", "the release answer's balances, as `rb<i>`", NotRead},
	{"quarantined_at", "sweeper or tenant closure, on a record it cannot settle exactly", "Redis TIME at the quarantine (the id then sits in Tenant.Quarantine, out of Tenant.Deadlines)", NotRead},
	{"quarantine_reason", "as `quarantined_at`", "why", NotRead},
	{"quarantine_resolution", "an operator (OpsService.ResolveQuarantined)", "`RELEASED`, `EXPIRED` or `REQUEUED`", NotRead},
}

// ReservationReadFields are the names of the fields the reads return, in
// layout order: mode Read, then (with on) ReadOnRequest.
func ReservationReadFields(onRequest bool) []string {
	var out []string
	for _, m := range []ReadMode{Read, ReadOnRequest} {
		if m == ReadOnRequest && !onRequest {
			break
		}
		for _, f := range ReservationLayout {
			if f.Read == m {
				out = append(out, f.Name)
			}
		}
	}
	return out
}

// IsReservationField reports whether name is a field of ReservationLayout
// (a numbered family's member included: rb1, cb12, ...).
func IsReservationField(name string) bool {
	for _, f := range ReservationLayout {
		tag, numbered := strings.CutSuffix(f.Name, "<i>")
		if !numbered {
			if name == f.Name {
				return true
			}
			continue
		}
		if i, ok := strings.CutPrefix(name, tag); ok && i != "" && strings.Trim(i, "0123456789") == "" && i[0] != '0' {
			return true
		}
	}
	return false
}
