package ledger

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// ReserveCall is a live reserve's script call exactly as Reserve builds it
// (typed KEYS and ARGV, the same derivation), for a tool that times the
// script without the service in front: cmd/cycles-bench's raw-script
// ceiling. Only the reservation id and the idempotency key change from call
// to call (Run); the payload hash stays the request's, which the script only
// stores and compares.
type ReserveCall struct {
	tenant keys.Tenant
	keys   reserveKeys
	args   reserveArgs
}

// NewReserveCall works out req for tenant as Reserve would (req must be a
// live reserve; its idempotency key is replaced on every Run).
func (l *Ledger) NewReserveCall(ctx context.Context, tenant string, req *cyclesv1.CreateReservationRequest) (*ReserveCall, error) {
	ks, args, err := l.reserveCall(ctx, tenant, req, func() string { return "" })
	if err != nil {
		return nil, err
	}
	return &ReserveCall{tenant: keys.Tenant(tenant), keys: ks, args: args}, nil
}

// Def is the reserve script's definition (its name in reports).
func (c *ReserveCall) Def() *script.Def { return scriptReserve.Def }

// Run runs the reserve through exec as reservation id, with id as its
// idempotency key too. It is safe for concurrent use (c is copied).
func (c *ReserveCall) Run(ctx context.Context, exec *script.Executor, id string) error {
	ks, args := c.keys, c.args
	ks.Reservation, ks.Idem = c.tenant.Reservation(id), c.tenant.Idempotency("reserve", id)
	args.ID, args.IdempotencyKey = id, id
	_, err := scriptReserve.RunFlat(ctx, exec, ks, args)
	return err
}
