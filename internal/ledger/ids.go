package ledger

import (
	"context"

	"github.com/google/uuid"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

func newUUID() string { return uuid.New().String() }

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
