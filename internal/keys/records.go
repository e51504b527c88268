package keys

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Record layouts: the fields every script agrees on. Amounts are canonical
// decimal strings (int64, written with HINCRBY or from int64.lua results);
// times are integer milliseconds from Redis TIME; enums are the proto value
// names without their prefix (ACTIVE, TOKENS, ALLOW_IF_AVAILABLE, ...).
//
// Tenant hash (Tenant.Record):
//
//	tenant_id, name, status (ACTIVE|SUSPENDED|CLOSED), default_policy,
//	default_ttl_ms, max_ttl_ms (0 = no cap), max_extensions, created_at,
//	updated_at, closed_at, metadata (JSON object)
//
// API key hash (Tenant.APIKey):
//
//	key_id, tenant_id, name, hash (hex SHA-256 of the presented key),
//	status (ACTIVE|REVOKED), created_at, revoked_at, revoked_reason,
//	permissions (JSON array of Permission values; absent on keys stored
//	before permissions existed, which hold internal/permission.Legacy),
//	expires_at (absent = never), description, metadata (JSON object),
//	scope_filter (JSON array of canonical internal/scopefilter patterns;
//	absent = every scope), updated_at (set by UpdateApiKey), last_used_at
//	(coarse: written by the touch script at most once a minute per key per
//	replica, never by the ledger scripts)
//
// Budget hash (Tenant.Budget):
//
//	scope_path, unit, bal (the balance, packed: BalanceField, Balance:
//	"<status>:<remaining>:<reserved>:<spent>:<allocated>:<debt>:<overdraft_limit>:<over 0|1>",
//	status ACTIVE|FROZEN|CLOSED), commit_overage_policy, caps (JSON Caps,
//	absent = none), created_at, updated_at, metadata (JSON object)
//	Invariant: remaining = allocated - spent - reserved - debt.
//
// Reservation hash (Tenant.Reservation): ReservationLayout
// (reservation_layout.go) is its one definition, which the Lua library, the
// reads and docs/design.md#reservation-records follow. While ACTIVE the id
// is in Tenant.Deadlines scored expires_at + grace_ms; terminal records get
// PEXPIRE TerminalRetentionMs; with an archive configured they get none when
// they settle: their id joins Tenant.ArchiveQueue and internal/archiver sets
// the -hot-retention TTL once PostgreSQL holds them.
//
// Event stream entry (Tenant.Events), appended by emit_event in lua/lib/core.lua:
//
//	id, type, cat, ts, scope, actor, key_id, req, trace, src, data (JSON)

// TerminalRetentionMs is how long COMMITTED/RELEASED/EXPIRED records (and
// direct-debit event records) are kept: 30 days.
const TerminalRetentionMs = 30 * 24 * 60 * 60 * 1000

// ScopePrefixes are the cumulative prefixes of a scope path, root first (the
// affected scopes internal/scope.Derive gives for it).
func ScopePrefixes(path string) []string {
	var out []string
	for i := 0; i < len(path); i++ {
		if path[i] == '/' {
			out = append(out, path[:i])
		}
	}
	return append(out, path)
}

// BudgetedScopes decodes a reservation's stored budgeted field: one digit per
// scope, its 1-based position among the prefixes of scopePath ("123"), or a
// JSON array of scope paths (a list the digits cannot say, and operator
// requeues). "" and "{}" decode to none.
func BudgetedScopes(stored, scopePath string) ([]string, error) {
	if stored == "" || stored == "{}" { // "{}": cjson's empty table
		return nil, nil
	}
	if stored[0] == '[' {
		var out []string
		if err := json.Unmarshal([]byte(stored), &out); err != nil {
			return nil, err
		}
		return out, nil
	}
	prefixes := ScopePrefixes(scopePath)
	out := make([]string, 0, len(stored))
	for i := 0; i < len(stored); i++ {
		d := int(stored[i] - '0')
		if d < 1 || d > 9 || d > len(prefixes) || scopePath == "" {
			return nil, fmt.Errorf("budgeted %q: not a scope position of %q", stored, scopePath)
		}
		out = append(out, prefixes[d-1])
	}
	return out, nil
}

// ImpliedSubject is the subject a reservation record leaves out: the levels
// of its scope path as a JSON object in canonical order
// ({"tenant":"acme","workspace":"prod"}), what internal/ledger stores for a
// subject naming exactly those levels. A record without a subject field has
// this subject.
func ImpliedSubject(scopePath string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, seg := range strings.Split(scopePath, "/") {
		k, v, _ := strings.Cut(seg, ":")
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + k + `":"` + v + `"`)
	}
	b.WriteByte('}')
	return b.String()
}
