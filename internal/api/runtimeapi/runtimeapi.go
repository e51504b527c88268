// Package runtimeapi is the gRPC face of the budget ledger
// (cycles.v1.RuntimeService). It only translates: the effective tenant comes
// from the authenticated principal, the request has already been validated
// by the interceptor chain (validate.Message), and internal/ledger decides.
//
// Checks done here, in the protocol's order (docs/protocol.md#errors):
//  1. metadata x-idempotency-key, when present, must equal the body key
//     (else INVALID_REQUEST);
//  2. subject.tenant (and the tenant filter of list/balances), when set, must
//     equal the effective tenant exactly (else FORBIDDEN);
//  3. a reservation id owned by another tenant (ids name their owner, see
//     internal/ledger ids.go) is FORBIDDEN when it exists there, else NOT_FOUND
//     (docs/protocol.md#reads), before any state of either tenant is touched.
package runtimeapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/reservationid"
)

type server struct {
	cyclesv1.UnimplementedRuntimeServiceServer
	l *ledger.Ledger
}

// New returns the RuntimeService implementation backed by l.
func New(l *ledger.Ledger) cyclesv1.RuntimeServiceServer {
	return &server{l: l}
}

// serve is every RPC's one path: the effective tenant and the idempotency
// header against the body key (key "" = the RPC has none), then the RPC's
// tenant rule (check), then the ledger, always with the effective tenant.
func serve[Req, Resp any](ctx context.Context, req Req, key string, check func(tenant string) error,
	do func(context.Context, string, Req) (Resp, error)) (Resp, error) {
	var none Resp
	tenant, err := auth.TenantFromContext(ctx)
	if err != nil {
		return none, err
	}
	if key != "" {
		if h := auth.FirstMetadata(ctx, auth.IdempotencyKeyHeader); h != "" && h != key {
			return none, apierr.Invalid("idempotency_key", "metadata %s does not match the body's idempotency_key", auth.IdempotencyKeyHeader)
		}
	}
	if err := check(tenant); err != nil {
		return none, err
	}
	return do(ctx, tenant, req)
}

// named is the rule of a request naming a tenant (subject.tenant, or the
// tenant filter of list and balances): when set, it must be the caller's,
// compared exactly.
func named(name, field string) func(tenant string) error {
	return func(tenant string) error {
		if name != "" && name != tenant {
			return apierr.New(apierr.Forbidden, "%s %q is not the caller's tenant", field, name).With("field", field)
		}
		return nil
	}
}

// owned is the rule of a request naming a reservation: the owner its id
// names is checked against the caller before either tenant's state is read.
func (s *server) owned(ctx context.Context, id string) func(tenant string) error {
	return func(tenant string) error {
		owner, ok := reservationid.Owner(id)
		if !ok || owner == tenant {
			return nil // the caller's own keyspace answers (NOT_FOUND if absent)
		}
		exists, err := s.l.Exists(ctx, owner, id)
		if err != nil {
			return err
		}
		if exists {
			return apierr.New(apierr.Forbidden, "reservation %s belongs to another tenant", id)
		}
		return apierr.New(apierr.NotFound, "reservation %s not found", id)
	}
}

func (s *server) CreateReservation(ctx context.Context, req *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
	return serve(ctx, req, req.GetIdempotencyKey(), named(req.GetSubject().GetTenant(), "subject.tenant"), s.l.Reserve)
}

func (s *server) CommitReservation(ctx context.Context, req *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
	return serve(ctx, req, req.GetIdempotencyKey(), s.owned(ctx, req.GetReservationId()), s.l.Commit)
}

func (s *server) ReleaseReservation(ctx context.Context, req *cyclesv1.ReleaseReservationRequest) (*cyclesv1.ReleaseReservationResponse, error) {
	return serve(ctx, req, req.GetIdempotencyKey(), s.owned(ctx, req.GetReservationId()), s.l.Release)
}

func (s *server) ExtendReservation(ctx context.Context, req *cyclesv1.ExtendReservationRequest) (*cyclesv1.ExtendReservationResponse, error) {
	return serve(ctx, req, req.GetIdempotencyKey(), s.owned(ctx, req.GetReservationId()), s.l.Extend)
}

func (s *server) GetReservation(ctx context.Context, req *cyclesv1.GetReservationRequest) (*cyclesv1.GetReservationResponse, error) {
	return serve(ctx, req, "", s.owned(ctx, req.GetReservationId()), s.l.Get)
}

func (s *server) ListReservations(ctx context.Context, req *cyclesv1.ListReservationsRequest) (*cyclesv1.ListReservationsResponse, error) {
	return serve(ctx, req, "", named(req.GetTenant(), "tenant"), s.l.List)
}

func (s *server) Decide(ctx context.Context, req *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
	return serve(ctx, req, req.GetIdempotencyKey(), named(req.GetSubject().GetTenant(), "subject.tenant"), s.l.Decide)
}

func (s *server) CreateEvent(ctx context.Context, req *cyclesv1.CreateEventRequest) (*cyclesv1.CreateEventResponse, error) {
	return serve(ctx, req, req.GetIdempotencyKey(), named(req.GetSubject().GetTenant(), "subject.tenant"), s.l.CreateEvent)
}

func (s *server) GetBalances(ctx context.Context, req *cyclesv1.GetBalancesRequest) (*cyclesv1.GetBalancesResponse, error) {
	return serve(ctx, req, "", named(req.GetTenant(), "tenant"), s.l.Balances)
}
