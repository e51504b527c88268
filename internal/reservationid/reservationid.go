// Package reservationid is the format of reservation ids, which name their
// owner: "r_<tenant>_<32 hex>". Keys are per tenant (one Cluster slot each),
// so without the owner in the id a request for another tenant's reservation
// could only answer NOT_FOUND; with it the runtime answers as
// docs/protocol.md#reads says — PERMISSION_DENIED when the id exists in its
// owner's tenant, NOT_FOUND when it does not — with one read and no global
// index. Tenant ids are at most 64 characters (auth.MaxTenantIDLen), so ids
// stay within the protocol's 128.
//
// It is a leaf of its own so that the transports (the on-behalf interceptor
// in internal/server) and the audit trail read an id's owner without
// importing the ledger that mints the ids.
package reservationid

import (
	"strings"

	"github.com/cyclesgo/cycles-go/internal/auth"
)

const prefix = "r_"

// New is the id of a new reservation of tenant, from a UUID in its text form
// (its dashes are dropped).
func New(tenant, uuid string) string {
	// One allocation: the UUID's dashes are dropped while copying.
	var b strings.Builder
	b.Grow(len(prefix) + len(tenant) + 1 + len(uuid))
	b.WriteString(prefix)
	b.WriteString(tenant)
	b.WriteByte('_')
	for i := 0; i < len(uuid); i++ {
		if uuid[i] != '-' {
			b.WriteByte(uuid[i])
		}
	}
	return b.String()
}

// Owner returns the tenant named by a reservation id; ok is false for ids of
// another shape.
func Owner(id string) (tenant string, ok bool) {
	rest, found := strings.CutPrefix(id, prefix)
	if !found || len(rest) < 34 || rest[len(rest)-33] != '_' {
		return "", false
	}
	tenant, hex := rest[:len(rest)-33], rest[len(rest)-32:]
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "", false
		}
	}
	if !auth.ValidTenantID(tenant) {
		return "", false
	}
	return tenant, true
}
