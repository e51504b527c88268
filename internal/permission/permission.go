// Package permission is the one definition of API-key permissions: the
// Cycles governance spec's Permission values, the set a new key gets by
// default, the set a key stored before permissions existed keeps, the
// wildcard rule, and the dashboard capabilities derived from a set.
//
// Which permission each RPC needs is not here: it is the cycles.v1.access
// method option in proto/, read by internal/server.
package permission

import (
	"fmt"
	"slices"
	"strings"
)

// All are the Permission values a key may hold, in the spec's order.
var All = []string{
	"reservations:create", "reservations:commit", "reservations:release", "reservations:extend",
	"reservations:list", "balances:read", "budgets:read", "budgets:write", "policies:read",
	"policies:write", "webhooks:read", "webhooks:write", "events:read",
	"admin:read", "admin:write",
	"admin:tenants:read", "admin:tenants:write", "admin:budgets:read", "admin:budgets:write",
	"admin:policies:read", "admin:policies:write", "admin:apikeys:read", "admin:apikeys:write",
	"admin:webhooks:read", "admin:webhooks:write", "admin:events:read", "admin:audit:read",
	// Cycles v0.1.26 (governance extensions): the quota counter listing.
	"action_quotas:read",
}

// Default is what a key created without permissions gets (the spec's
// default for tenant keys: no webhook or event self-service).
var Default = []string{
	"reservations:create", "reservations:commit", "reservations:release", "reservations:extend",
	"reservations:list", "balances:read", "budgets:read", "budgets:write", "policies:read", "policies:write",
}

// Legacy is what a key stored before keys carried permissions may do: every
// permission a tenant key could use then (the runtime, balances, the event
// log and the rate-limit check), so such keys keep exactly their access.
var Legacy = []string{
	"reservations:create", "reservations:commit", "reservations:release", "reservations:extend",
	"reservations:list", "balances:read", "events:read",
}

// Valid reports whether p is a Permission value.
func Valid(p string) bool { return slices.Contains(All, p) }

// Check validates a requested set: every value known, none twice. It
// returns the offending value's index and a reason.
func Check(ps []string) (int, error) {
	for i, p := range ps {
		if !Valid(p) {
			return i, fmt.Errorf("%q is not a permission (docs/protocol.md#api-key-permissions)", p)
		}
		if slices.Contains(ps[:i], p) {
			return i, fmt.Errorf("%q is listed twice", p)
		}
	}
	return 0, nil
}

// Grants reports whether a key holding held may do what need requires:
// need itself, or the spec's wildcards (admin:write satisfies any ":write"
// permission, admin:read any ":read" one; admin:read never a write).
// An empty need is granted to every key.
func Grants(held []string, need string) bool {
	if need == "" || slices.Contains(held, need) {
		return true
	}
	switch {
	case strings.HasSuffix(need, ":write"):
		return slices.Contains(held, "admin:write")
	case strings.HasSuffix(need, ":read"):
		return slices.Contains(held, "admin:read")
	}
	return false
}

// Capability flags of the spec's AuthIntrospectResponse.
var (
	// adminPlane are always false for a tenant key, whatever it holds.
	adminPlane = []string{"view_overview", "view_audit", "view_tenants", "view_api_keys", "manage_tenants", "manage_api_keys"}
	// derived maps a flag to the permissions that set it.
	derived = map[string][]string{
		"view_budgets":        {"budgets:read", "admin:read", "admin:budgets:read"},
		"view_policies":       {"policies:read", "admin:read", "admin:policies:read"},
		"view_webhooks":       {"webhooks:read", "admin:read", "admin:webhooks:read"},
		"view_events":         {"events:read", "admin:read", "admin:events:read"},
		"view_reservations":   {"reservations:list", "reservations:create", "reservations:commit", "reservations:release", "reservations:extend", "admin:read"},
		"manage_budgets":      {"budgets:write", "admin:write", "admin:budgets:write"},
		"manage_policies":     {"policies:write", "admin:write", "admin:policies:write"},
		"manage_webhooks":     {"webhooks:write", "admin:write", "admin:webhooks:write"},
		"manage_reservations": {"reservations:create", "reservations:commit", "reservations:release", "reservations:extend", "admin:write"},
	}
)

// Capabilities derives the dashboard flags: every flag true for the admin
// key; for a tenant key each flag is true iff it holds one of the flag's
// permissions, and the admin-plane flags are false.
func Capabilities(admin bool, held []string) map[string]bool {
	out := make(map[string]bool, len(adminPlane)+len(derived))
	for _, f := range adminPlane {
		out[f] = admin
	}
	for f, any := range derived {
		out[f] = admin || slices.ContainsFunc(any, func(p string) bool { return slices.Contains(held, p) })
	}
	return out
}
