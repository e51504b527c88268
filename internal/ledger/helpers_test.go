package ledger_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

var ctx = context.Background()

// env is one test's ledger on a fresh tenant.
type env struct {
	t      *testing.T
	c      redis.UniversalClient
	exec   *script.Executor
	l      *ledger.Ledger
	m      *telemetrytest.Reader
	tenant string
}

func newEnvOn(t *testing.T, c redis.UniversalClient) *env {
	t.Helper()
	ex := scripttest.On(t, c)
	m := telemetrytest.New()
	e := &env{t: t, c: c, exec: ex, m: m, tenant: ledgertest.NewTenantID(t),
		l: ledger.New(ex, ledger.Options{MeterProvider: m.Provider})}
	t.Cleanup(func() { ledgertest.CheckInvariants(t, c, e.tenant) })
	return e
}

// newEnv runs on the shared real redis-server.
func newEnv(t *testing.T) *env { return newEnvOn(t, redistest.SharedClient(t)) }

// newFundedEnv is newEnv with a TOKENS budget of allocated at the tenant's
// root.
func newFundedEnv(t *testing.T, allocated int64) *env {
	t.Helper()
	e := newEnv(t)
	e.budget(ledgertest.Budget{Scope: e.scope(""), Allocated: allocated})
	return e
}

// scopeOf is the scope path rest below tenant's root ("" for the root).
func scopeOf(tenant, rest string) string {
	if rest == "" {
		return "tenant:" + tenant
	}
	return "tenant:" + tenant + "/" + rest
}

// seedBudget seeds b on tenant, in TOKENS unless b names a unit.
func seedBudget(t *testing.T, c redis.UniversalClient, tenant string, b ledgertest.Budget) {
	t.Helper()
	if b.Unit == "" {
		b.Unit = "TOKENS"
	}
	ledgertest.SeedBudget(t, c, tenant, b)
}

func (e *env) scope(rest string) string { return scopeOf(e.tenant, rest) }

func (e *env) budget(b ledgertest.Budget) {
	e.t.Helper()
	seedBudget(e.t, e.c, e.tenant, b)
}

func (e *env) state(scopeRest string) ledgertest.State {
	e.t.Helper()
	return ledgertest.ReadBudget(e.t, e.c, e.tenant, e.scope(scopeRest), "TOKENS")
}

func tokens(n int64) *cyclesv1.Amount {
	return &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: n}
}

func i64p(v int64) *int64 { return &v }

var action = &cyclesv1.Action{Kind: "llm.completion", Name: "openai:gpt-4o-mini"}

func reserveReq(key string, subj *cyclesv1.Subject, est int64) *cyclesv1.CreateReservationRequest {
	return &cyclesv1.CreateReservationRequest{IdempotencyKey: key, Subject: subj, Action: action, Estimate: tokens(est)}
}

func (e *env) reserve(key string, est int64, mut ...func(*cyclesv1.CreateReservationRequest)) (*cyclesv1.CreateReservationResponse, error) {
	req := reserveReq(key, &cyclesv1.Subject{Workspace: "prod"}, est)
	for _, f := range mut {
		f(req)
	}
	return e.l.Reserve(ctx, e.tenant, req)
}

func (e *env) mustReserve(key string, est int64, mut ...func(*cyclesv1.CreateReservationRequest)) *cyclesv1.CreateReservationResponse {
	e.t.Helper()
	r, err := e.reserve(key, est, mut...)
	if err != nil {
		e.t.Fatalf("reserve %s: %v", key, err)
	}
	return r
}

func (e *env) commit(rid, key string, actual int64) (*cyclesv1.CommitReservationResponse, error) {
	return e.l.Commit(ctx, e.tenant, &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: key, Actual: tokens(actual)})
}

func (e *env) release(rid, key string) (*cyclesv1.ReleaseReservationResponse, error) {
	return e.l.Release(ctx, e.tenant, &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: key})
}

func wantCode(t *testing.T, err error, code apierr.Code) *apierr.Error {
	t.Helper()
	ae, ok := apierr.As(err)
	if !ok || ae.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	return ae
}

func withPolicy(p cyclesv1.CommitOveragePolicy) func(*cyclesv1.CreateReservationRequest) {
	return func(r *cyclesv1.CreateReservationRequest) { r.OveragePolicy = p }
}

func withTTL(ttl, grace int64) func(*cyclesv1.CreateReservationRequest) {
	return func(r *cyclesv1.CreateReservationRequest) { r.TtlMs = &ttl; r.GracePeriodMs = &grace }
}

func withSubject(s *cyclesv1.Subject) func(*cyclesv1.CreateReservationRequest) {
	return func(r *cyclesv1.CreateReservationRequest) { r.Subject = s }
}

// sameBytes asserts proto.Equal and deterministic-marshal byte equality.
func sameBytes(t *testing.T, a, b proto.Message) {
	t.Helper()
	if !proto.Equal(a, b) {
		t.Fatalf("responses differ:\n%v\n%v", a, b)
	}
	ab, _ := proto.MarshalOptions{Deterministic: true}.Marshal(a)
	bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	if string(ab) != string(bb) {
		t.Fatalf("responses are not byte-identical")
	}
}

// redisNow is Redis TIME in ms (the scripts' only clock).
func redisNow(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	return ledgertest.RedisNowMs(t, c)
}

func atoi(s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		panic(err)
	}
	return v
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
