package ledger

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// Reservation ids name their owner: "r_<tenant>_<32 hex>". Keys are per
// tenant (one Cluster slot each), so without the owner in the id a request
// for another tenant's reservation could only answer NOT_FOUND; with it the
// runtime answers as docs/protocol.md#reads says — PERMISSION_DENIED when the id
// exists in its owner's tenant, NOT_FOUND when it does not — with one read
// and no global index. Tenant ids are at most 64 characters
// (auth.MaxTenantIDLen), so ids stay within the protocol's 128.
const reservationIDPrefix = "r_"

// reservationID builds the id of a new reservation of tenant from a UUID.
func reservationID(tenant, u string) string {
	// One allocation: the UUID's dashes are dropped while copying.
	var b strings.Builder
	b.Grow(len(reservationIDPrefix) + len(tenant) + 1 + len(u))
	b.WriteString(reservationIDPrefix)
	b.WriteString(tenant)
	b.WriteByte('_')
	for i := 0; i < len(u); i++ {
		if u[i] != '-' {
			b.WriteByte(u[i])
		}
	}
	return b.String()
}

func newUUID() string { return uuid.New().String() }

// OwnerOf returns the tenant named by a reservation id; ok is false for ids
// of another shape.
func OwnerOf(id string) (tenant string, ok bool) {
	rest, found := strings.CutPrefix(id, reservationIDPrefix)
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

// Exists reports whether tenant holds a reservation record with this id
// (in any state, until its terminal retention ends).
func (l *Ledger) Exists(ctx context.Context, tenant, id string) (bool, error) {
	var out struct {
		Exists bool `json:"exists"`
	}
	if err := scriptExists.RunInto(ctx, l.exec, &out, reservationKeys{keys.Tenant(tenant).Reservation(id)}, script.None{}); err != nil {
		return false, err
	}
	return out.Exists, nil
}
