package runtimeapi_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/api/runtimeapi"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/server"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// serve starts the RuntimeService against c behind the production chain.
func serve(t *testing.T, c redis.UniversalClient) cyclesv1.RuntimeServiceClient {
	t.Helper()
	ex := scripttest.On(t, c)
	conn := grpctest.Start(t, server.Services{Runtime: runtimeapi.New(ledger.New(ex, ledger.Options{}))})
	return cyclesv1.NewRuntimeServiceClient(conn)
}

// as is a context calling as tenant ("" = unauthenticated) with extra
// metadata, under request id "req-test" (echoed in every ErrorInfo).
func as(tenant string, kv ...string) context.Context {
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs(append([]string{auth.RequestIDHeader, "req-test"}, kv...)...))
	if tenant != "" {
		ctx = grpctest.AsTenant(ctx, tenant)
	}
	return ctx
}

var action = &cyclesv1.Action{Kind: "llm.completion", Name: "m"}

func tokens(n int64) *cyclesv1.Amount {
	return &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: n}
}

func reserveReq(key string, est int64) *cyclesv1.CreateReservationRequest {
	return &cyclesv1.CreateReservationRequest{IdempotencyKey: key, Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Estimate: tokens(est)}
}

// fixture is one case's tenant and helpers.
type fixture struct {
	t      *testing.T
	c      redis.UniversalClient
	rt     cyclesv1.RuntimeServiceClient
	tenant string
}

func (f *fixture) budget(rest string, b ledgertest.Budget) {
	ledgertest.SeedBudgetAt(f.t, f.c, f.tenant, rest, b)
}

func (f *fixture) reserve(key string, est int64) string {
	f.t.Helper()
	r, err := f.rt.CreateReservation(as(f.tenant), reserveReq(key, est))
	if err != nil {
		f.t.Fatalf("reserve: %v", err)
	}
	return r.GetReservationId()
}

// Every error code of docs/protocol.md#errors the runtime can produce: gRPC status
// code, ErrorInfo reason (domain cycles), and Redis unchanged by the call.
func TestErrorCodes(t *testing.T) {
	c := redistest.SharedClient(t)
	rt := serve(t, c)
	cases := []struct {
		name   string
		code   codes.Code
		reason apierr.Code
		detail map[string]string
		// setup seeds state and returns the failing call.
		setup func(f *fixture) func() error
	}{
		{"validation", codes.InvalidArgument, apierr.InvalidRequest, map[string]string{"field": "idempotency_key"}, func(f *fixture) func() error {
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("", 1))) }
		}},
		{"idempotency header differs from body", codes.InvalidArgument, apierr.InvalidRequest, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() error {
				return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant, auth.IdempotencyKeyHeader, "other"), reserveReq("k", 1)))
			}
		}},
		{"malformed list cursor", codes.InvalidArgument, apierr.InvalidRequest, nil, func(f *fixture) func() error {
			return func() error {
				return errtest.ErrOf(f.rt.ListReservations(as(f.tenant), &cyclesv1.ListReservationsRequest{Cursor: "%%%"}))
			}
		}},
		{"unit mismatch on reserve", codes.InvalidArgument, apierr.UnitMismatch, map[string]string{"requested_unit": "TOKENS", "expected_units": "CREDITS"}, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Unit: "CREDITS", Allocated: 100})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"unit mismatch on commit", codes.InvalidArgument, apierr.UnitMismatch, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			return func() error {
				_, err := f.rt.CommitReservation(as(f.tenant), &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c",
					Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_CREDITS, Amount: 1}})
				return err
			}
		}},
		{"unauthenticated", codes.Unauthenticated, apierr.Unauthorized, nil, func(f *fixture) func() error {
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(""), reserveReq("k", 1))) }
		}},
		{"subject of another tenant", codes.PermissionDenied, apierr.Forbidden, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() error {
				q := reserveReq("k", 1)
				q.Subject.Tenant = f.tenant + "x"
				return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), q))
			}
		}},
		{"tenant filter of another tenant", codes.PermissionDenied, apierr.Forbidden, nil, func(f *fixture) func() error {
			return func() error {
				return errtest.ErrOf(f.rt.GetBalances(as(f.tenant), &cyclesv1.GetBalancesRequest{Tenant: "someone-else"}))
			}
		}},
		{"no budget", codes.NotFound, apierr.NotFound, nil, func(f *fixture) func() error {
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"unknown reservation", codes.NotFound, apierr.NotFound, nil, func(f *fixture) func() error {
			return func() error {
				return errtest.ErrOf(f.rt.GetReservation(as(f.tenant), &cyclesv1.GetReservationRequest{ReservationId: "nope"}))
			}
		}},
		{"budget exceeded", codes.FailedPrecondition, apierr.BudgetExceeded, map[string]string{"remaining": "100", "requested": "101"}, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 101))) }
		}},
		{"budget frozen", codes.FailedPrecondition, apierr.BudgetFrozen, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100, Status: "FROZEN"})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"budget closed", codes.FailedPrecondition, apierr.BudgetClosed, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100, Status: "CLOSED"})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"over limit", codes.FailedPrecondition, apierr.OverdraftLimitExceeded, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100, IsOverLimit: true})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"debt outstanding", codes.FailedPrecondition, apierr.DebtOutstanding, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100, Debt: 1})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"reservation finalized", codes.FailedPrecondition, apierr.ReservationFinalized, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			if _, err := f.rt.ReleaseReservation(as(f.tenant), &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: "r"}); err != nil {
				f.t.Fatal(err)
			}
			return func() error {
				return errtest.ErrOf(f.rt.CommitReservation(as(f.tenant), &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c", Actual: tokens(1)}))
			}
		}},
		{"reservation expired", codes.FailedPrecondition, apierr.ReservationExpired, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			ledgertest.Backdate(f.t, f.c, f.tenant, rid, 10*time.Second, 5*time.Second)
			return func() error {
				return errtest.ErrOf(f.rt.CommitReservation(as(f.tenant), &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: "c", Actual: tokens(1)}))
			}
		}},
		{"idempotency mismatch", codes.AlreadyExists, apierr.IdempotencyMismatch, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100})
			f.reserve("k", 10)
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 11))) }
		}},
		{"max extensions", codes.FailedPrecondition, apierr.MaxExtensionsExceeded, nil, func(f *fixture) func() error {
			zero := 0
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{MaxExtensions: &zero})
			f.budget("", ledgertest.Budget{Allocated: 100})
			rid := f.reserve("k", 10)
			return func() error {
				return errtest.ErrOf(f.rt.ExtendReservation(as(f.tenant), &cyclesv1.ExtendReservationRequest{ReservationId: rid, IdempotencyKey: "x", ExtendByMs: 10}))
			}
		}},
		{"tenant closed", codes.FailedPrecondition, apierr.TenantClosed, nil, func(f *fixture) func() error {
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{Status: "CLOSED"})
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() error {
				return errtest.ErrOf(f.rt.CreateEvent(as(f.tenant), &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Actual: tokens(1)}))
			}
		}},
		{"tenant suspended", codes.FailedPrecondition, apierr.TenantSuspended, nil, func(f *fixture) func() error {
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{Status: "SUSPENDED"})
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() error { return errtest.ErrOf(f.rt.CreateReservation(as(f.tenant), reserveReq("k", 1))) }
		}},
		{"malformed tenant record", codes.Internal, apierr.InternalError, nil, func(f *fixture) func() error {
			ledgertest.SeedTenant(f.t, f.c, f.tenant, ledgertest.Tenant{Status: "??"})
			f.budget("", ledgertest.Budget{Allocated: 100})
			return func() error {
				return errtest.ErrOf(f.rt.Decide(as(f.tenant), &cyclesv1.DecideRequest{IdempotencyKey: "d", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Estimate: tokens(1)}))
			}
		}},
		{"amount overflow", codes.InvalidArgument, apierr.Overflow, nil, func(f *fixture) func() error {
			f.budget("", ledgertest.Budget{Allocated: 100, Spent: 9223372036854775800, RemainingOverride: "100"})
			return func() error {
				return errtest.ErrOf(f.rt.CreateEvent(as(f.tenant), &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Actual: tokens(50)}))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fixture{t: t, c: c, rt: rt, tenant: ledgertest.NewTenantID(t)}
			call := tc.setup(f)
			before := ledgertest.Dump(t, c, f.tenant)
			err := call()
			if status.Code(err) != tc.code {
				t.Fatalf("status = %v (%v), want %v", status.Code(err), err, tc.code)
			}
			reason, details, ok := apierr.FromStatus(err)
			if !ok || reason != tc.reason || details["request_id"] != "req-test" {
				t.Fatalf("ErrorInfo = %v %v %v, want reason %s", reason, details, ok, tc.reason)
			}
			for k, v := range tc.detail {
				if details[k] != v {
					t.Fatalf("detail %s = %q, want %q (all: %v)", k, details[k], v, details)
				}
			}
			if after := ledgertest.Dump(t, c, f.tenant); after != before {
				t.Fatalf("the refused call changed Redis:\n--- before\n%s--- after\n%s", before, after)
			}
			if tc.reason != apierr.Overflow {
				ledgertest.CheckInvariants(t, c, f.tenant)
			}
		})
	}
}

// Redis unreachable: UNAVAILABLE (fail closed).
func TestUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	rt := serve(t, c)
	tenant := ledgertest.NewTenantID(t)
	srv.Kill()
	_, err := rt.CreateReservation(as(tenant), reserveReq("k", 1))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("status = %v (%v)", status.Code(err), err)
	}
	if reason, _, _ := apierr.FromStatus(err); reason != apierr.Unavailable {
		t.Fatalf("reason = %s", reason)
	}
}

// The happy path through gRPC, with the optional idempotency header.
func TestLifecycleOverGRPC(t *testing.T) {
	c := redistest.SharedClient(t)
	rt := serve(t, c)
	f := &fixture{t: t, c: c, rt: rt, tenant: ledgertest.NewTenantID(t)}
	f.budget("", ledgertest.Budget{Allocated: 1000})
	ctx := as(f.tenant, auth.IdempotencyKeyHeader, "k1")
	q := reserveReq("k1", 100)
	q.Subject.Tenant = f.tenant
	r, err := rt.CreateReservation(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.ExtendReservation(as(f.tenant), &cyclesv1.ExtendReservationRequest{ReservationId: r.GetReservationId(), IdempotencyKey: "x", ExtendByMs: 1000}); err != nil {
		t.Fatal(err)
	}
	cm, err := rt.CommitReservation(as(f.tenant, auth.IdempotencyKeyHeader, "c1"), &cyclesv1.CommitReservationRequest{ReservationId: r.GetReservationId(), IdempotencyKey: "c1", Actual: tokens(40)})
	if err != nil || cm.GetCharged().GetAmount() != 40 || cm.GetReleased().GetAmount() != 60 {
		t.Fatalf("commit = %v %v", cm, err)
	}
	g, err := rt.GetReservation(as(f.tenant), &cyclesv1.GetReservationRequest{ReservationId: r.GetReservationId()})
	if err != nil || g.GetReservation().GetStatus() != cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED || g.GetReservation().GetExtensionCount() != 1 {
		t.Fatalf("get = %v %v", g, err)
	}
	l, err := rt.ListReservations(as(f.tenant), &cyclesv1.ListReservationsRequest{Tenant: f.tenant})
	if err != nil || len(l.GetReservations()) != 1 {
		t.Fatalf("list = %v %v", l, err)
	}
	b, err := rt.GetBalances(as(f.tenant), &cyclesv1.GetBalancesRequest{Tenant: f.tenant})
	if err != nil || len(b.GetBalances()) != 1 || b.GetBalances()[0].GetSpent().GetAmount() != 40 {
		t.Fatalf("balances = %v %v", b, err)
	}
	d, err := rt.Decide(as(f.tenant), &cyclesv1.DecideRequest{IdempotencyKey: "d", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Estimate: tokens(5000)})
	if err != nil || d.GetDecision() != cyclesv1.Decision_DECISION_DENY || d.GetReasonCode() != "BUDGET_EXCEEDED" {
		t.Fatalf("decide = %v %v", d, err)
	}
	ev, err := rt.CreateEvent(as(f.tenant), &cyclesv1.CreateEventRequest{IdempotencyKey: "e", Subject: &cyclesv1.Subject{Workspace: "prod"}, Action: action, Actual: tokens(10)})
	if err != nil || ev.GetStatus() != cyclesv1.EventStatus_EVENT_STATUS_APPLIED || ev.GetEventId() == "" {
		t.Fatalf("event = %v %v", ev, err)
	}
	ledgertest.CheckInvariants(t, c, f.tenant)
}

// TestOtherTenantsReservations: ids name their owner, so a reservation of
// tenant A asked for by tenant B is PERMISSION_DENIED when it exists and
// NOT_FOUND when it does not (docs/protocol.md#reads), on every id-taking RPC, and
// nothing of A changes.
func TestOtherTenantsReservations(t *testing.T) {
	c := redistest.SharedClient(t)
	rt := serve(t, c)
	a := &fixture{t: t, c: c, rt: rt, tenant: ledgertest.NewTenantID(t)}
	b := ledgertest.NewTenantID(t)
	a.budget("", ledgertest.Budget{Allocated: 100})
	rid := a.reserve("k", 10)
	missing := rid[:len(rid)-32] + "00000000000000000000000000000000"
	calls := map[string]func(id string) error{
		"get": func(id string) error {
			return errtest.ErrOf(rt.GetReservation(as(b), &cyclesv1.GetReservationRequest{ReservationId: id}))
		},
		"commit": func(id string) error {
			return errtest.ErrOf(rt.CommitReservation(as(b), &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: "c", Actual: tokens(1)}))
		},
		"release": func(id string) error {
			return errtest.ErrOf(rt.ReleaseReservation(as(b), &cyclesv1.ReleaseReservationRequest{ReservationId: id, IdempotencyKey: "r"}))
		},
		"extend": func(id string) error {
			return errtest.ErrOf(rt.ExtendReservation(as(b), &cyclesv1.ExtendReservationRequest{ReservationId: id, IdempotencyKey: "e", ExtendByMs: 1000}))
		},
	}
	before := ledgertest.Dump(t, c, a.tenant)
	for name, call := range calls {
		if err := call(rid); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s of A's reservation by B: %v, want PERMISSION_DENIED", name, err)
		} else if reason, _, _ := apierr.FromStatus(err); reason != apierr.Forbidden {
			t.Errorf("%s: reason %s, want FORBIDDEN", name, reason)
		}
		if err := call(missing); status.Code(err) != codes.NotFound {
			t.Errorf("%s of a missing id of A by B: %v, want NOT_FOUND", name, err)
		}
	}
	if after := ledgertest.Dump(t, c, a.tenant); !reflect.DeepEqual(before, after) {
		t.Fatalf("tenant A changed:\nbefore %v\nafter  %v", before, after)
	}
	// The owner still reaches it.
	if _, err := rt.GetReservation(as(a.tenant), &cyclesv1.GetReservationRequest{ReservationId: rid}); err != nil {
		t.Fatal(err)
	}
}
