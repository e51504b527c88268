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
)

type server struct {
	cyclesv1.UnimplementedRuntimeServiceServer
	l *ledger.Ledger
}

// New returns the RuntimeService implementation backed by l.
func New(l *ledger.Ledger) cyclesv1.RuntimeServiceServer {
	return &server{l: l}
}

// caller returns the effective tenant and checks the idempotency header
// against the body key (bodyKey "" = the RPC has none).
func caller(ctx context.Context, bodyKey string) (string, error) {
	tenant, err := auth.TenantFromContext(ctx)
	if err != nil {
		return "", err
	}
	if bodyKey != "" {
		if h := auth.FirstMetadata(ctx, auth.IdempotencyKeyHeader); h != "" && h != bodyKey {
			return "", apierr.Invalid("idempotency_key", "metadata %s does not match the body's idempotency_key", auth.IdempotencyKeyHeader)
		}
	}
	return tenant, nil
}

// sameTenant: a named tenant must be the caller's, compared exactly.
func sameTenant(tenant, named, field string) error {
	if named != "" && named != tenant {
		return apierr.New(apierr.Forbidden, "%s %q is not the caller's tenant", field, named).With("field", field)
	}
	return nil
}

// owned checks the owner named by a reservation id against the caller.
func (s *server) owned(ctx context.Context, tenant, id string) error {
	owner, ok := ledger.OwnerOf(id)
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

func (s *server) CreateReservation(ctx context.Context, req *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
	tenant, err := caller(ctx, req.GetIdempotencyKey())
	if err != nil {
		return nil, err
	}
	if err := sameTenant(tenant, req.GetSubject().GetTenant(), "subject.tenant"); err != nil {
		return nil, err
	}
	return s.l.Reserve(ctx, tenant, req)
}

func (s *server) CommitReservation(ctx context.Context, req *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
	tenant, err := caller(ctx, req.GetIdempotencyKey())
	if err != nil {
		return nil, err
	}
	if err := s.owned(ctx, tenant, req.GetReservationId()); err != nil {
		return nil, err
	}
	return s.l.Commit(ctx, tenant, req)
}

func (s *server) ReleaseReservation(ctx context.Context, req *cyclesv1.ReleaseReservationRequest) (*cyclesv1.ReleaseReservationResponse, error) {
	tenant, err := caller(ctx, req.GetIdempotencyKey())
	if err != nil {
		return nil, err
	}
	if err := s.owned(ctx, tenant, req.GetReservationId()); err != nil {
		return nil, err
	}
	return s.l.Release(ctx, tenant, req)
}

func (s *server) ExtendReservation(ctx context.Context, req *cyclesv1.ExtendReservationRequest) (*cyclesv1.ExtendReservationResponse, error) {
	tenant, err := caller(ctx, req.GetIdempotencyKey())
	if err != nil {
		return nil, err
	}
	if err := s.owned(ctx, tenant, req.GetReservationId()); err != nil {
		return nil, err
	}
	return s.l.Extend(ctx, tenant, req)
}

func (s *server) GetReservation(ctx context.Context, req *cyclesv1.GetReservationRequest) (*cyclesv1.GetReservationResponse, error) {
	tenant, err := caller(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := s.owned(ctx, tenant, req.GetReservationId()); err != nil {
		return nil, err
	}
	return s.l.Get(ctx, tenant, req)
}

func (s *server) ListReservations(ctx context.Context, req *cyclesv1.ListReservationsRequest) (*cyclesv1.ListReservationsResponse, error) {
	tenant, err := caller(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := sameTenant(tenant, req.GetTenant(), "tenant"); err != nil {
		return nil, err
	}
	return s.l.List(ctx, tenant, req)
}

func (s *server) Decide(ctx context.Context, req *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
	tenant, err := caller(ctx, req.GetIdempotencyKey())
	if err != nil {
		return nil, err
	}
	if err := sameTenant(tenant, req.GetSubject().GetTenant(), "subject.tenant"); err != nil {
		return nil, err
	}
	return s.l.Decide(ctx, tenant, req)
}

func (s *server) CreateEvent(ctx context.Context, req *cyclesv1.CreateEventRequest) (*cyclesv1.CreateEventResponse, error) {
	tenant, err := caller(ctx, req.GetIdempotencyKey())
	if err != nil {
		return nil, err
	}
	if err := sameTenant(tenant, req.GetSubject().GetTenant(), "subject.tenant"); err != nil {
		return nil, err
	}
	return s.l.CreateEvent(ctx, tenant, req)
}

func (s *server) GetBalances(ctx context.Context, req *cyclesv1.GetBalancesRequest) (*cyclesv1.GetBalancesResponse, error) {
	tenant, err := caller(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := sameTenant(tenant, req.GetTenant(), "tenant"); err != nil {
		return nil, err
	}
	return s.l.Balances(ctx, tenant, req)
}
