package admin

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
)

func i64(v int64) *int64 { return &v }
func i32(v int32) *int32 { return &v }
func str(v string) *string {
	return &v
}

// createTenant creates a tenant with defaults and returns its id.
func (e *env) createTenant() string {
	e.t.Helper()
	id := newTenantID(e.t)
	mustCall(e.t, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: id, Name: "Acme"}, e.svc.CreateTenant)
	return id
}

func TestCreateTenantAppliesDefaultsRegistersAndEmits(t *testing.T) {
	e := newEnv(t)
	id := newTenantID(t)
	resp := mustCall(t, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: id, Name: "Acme", Metadata: map[string]string{"team": "a/b"}}, e.svc.CreateTenant)
	got := resp.GetTenant()
	if got.GetTenantId() != id || got.GetName() != "Acme" || got.GetStatus() != cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE ||
		got.GetDefaultCommitOveragePolicy() != cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_IF_AVAILABLE ||
		got.GetDefaultReservationTtlMs() != 60_000 || got.GetMaxReservationTtlMs() != 0 || got.GetMaxReservationExtensions() != 10 ||
		got.GetCreatedAtMs() == 0 || got.GetCreatedAtMs() != got.GetUpdatedAtMs() || got.ClosedAtMs != nil ||
		got.GetMetadata()["team"] != "a/b" {
		t.Fatalf("tenant = %v", got)
	}
	// Stored with the record field names of internal/keys/records.go.
	rec := e.rdb.HGetAll(context.Background(), keys.Tenant(id).Record()).Val()
	want := map[string]string{"tenant_id": id, "status": "ACTIVE", "default_policy": "ALLOW_IF_AVAILABLE",
		"default_ttl_ms": "60000", "max_ttl_ms": "0", "max_extensions": "10"}
	for k, v := range want {
		if rec[k] != v {
			t.Fatalf("record %s = %q, want %q (record %v)", k, rec[k], v, rec)
		}
	}
	if s := e.rdb.ZScore(context.Background(), keys.Tenants, id); s.Err() != nil || s.Val() != 0 {
		t.Fatalf("registry entry: %v %v", s.Val(), s.Err())
	}
	evs := e.events(id)
	if len(evs) != 1 || evs[0].Type != "tenant.created" || evs[0].Category != "tenant" || evs[0].Scope != "tenant:"+id ||
		evs[0].Actor != "admin" || evs[0].Request != "req-test" || evs[0].Data["new_status"] != "ACTIVE" {
		t.Fatalf("events = %+v", evs)
	}
	if n := e.metrics.Sum(t, "cycles.admin.tenants.created"); n != 1 {
		t.Fatalf("tenants.created = %d", n)
	}

	// Explicit values are kept.
	id2 := newTenantID(t)
	got = mustCall(t, e.ctx, &cyclesv1.CreateTenantRequest{TenantId: id2,
		DefaultCommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT,
		DefaultReservationTtlMs:    i64(5_000), MaxReservationTtlMs: i64(86_400_000), MaxReservationExtensions: i32(0)},
		e.svc.CreateTenant).GetTenant()
	if got.GetDefaultCommitOveragePolicy() != cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT ||
		got.GetDefaultReservationTtlMs() != 5_000 || got.GetMaxReservationTtlMs() != 86_400_000 || got.GetMaxReservationExtensions() != 0 {
		t.Fatalf("tenant = %v", got)
	}
}

func TestCreateTenantRefusals(t *testing.T) {
	e := newEnv(t)
	existing := e.createTenant()
	long := strings.Repeat("a", 129)
	cases := []refusal[*cyclesv1.CreateTenantRequest]{
		{"empty id", &cyclesv1.CreateTenantRequest{}, codes.InvalidArgument, apierr.InvalidRequest},
		{"uppercase id", &cyclesv1.CreateTenantRequest{TenantId: "Acme"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"id with colon", &cyclesv1.CreateTenantRequest{TenantId: "a:b"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"id with brace", &cyclesv1.CreateTenantRequest{TenantId: "a{b}"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"id too long", &cyclesv1.CreateTenantRequest{TenantId: long}, codes.InvalidArgument, apierr.InvalidRequest},
		{"name too long", &cyclesv1.CreateTenantRequest{TenantId: "x", Name: strings.Repeat("n", 257)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"name control char", &cyclesv1.CreateTenantRequest{TenantId: "x", Name: "a\nb"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"unknown policy", &cyclesv1.CreateTenantRequest{TenantId: "x", DefaultCommitOveragePolicy: 99}, codes.InvalidArgument, apierr.InvalidRequest},
		{"ttl too small", &cyclesv1.CreateTenantRequest{TenantId: "x", DefaultReservationTtlMs: i64(999)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"ttl too large", &cyclesv1.CreateTenantRequest{TenantId: "x", DefaultReservationTtlMs: i64(86_400_001)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"max ttl zero", &cyclesv1.CreateTenantRequest{TenantId: "x", MaxReservationTtlMs: i64(0)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"extensions negative", &cyclesv1.CreateTenantRequest{TenantId: "x", MaxReservationExtensions: i32(-1)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"extensions too many", &cyclesv1.CreateTenantRequest{TenantId: "x", MaxReservationExtensions: i32(1001)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"metadata bad key", &cyclesv1.CreateTenantRequest{TenantId: "x", Metadata: map[string]string{"a b": "c"}}, codes.InvalidArgument, apierr.InvalidRequest},
		{"duplicate", &cyclesv1.CreateTenantRequest{TenantId: existing, Name: "other"}, codes.AlreadyExists, apierr.DuplicateResource},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.req.GetTenantId()
			if !strings.Contains(tc.name, "duplicate") {
				// Point invalid requests at a fresh id so "nothing written" is provable.
				if target == "x" {
					target = newTenantID(t)
					tc.req.TenantId = target
				}
			}
			refusedUnchanged(e, t, target, tc.req, e.svc.CreateTenant, tc.code, tc.reason)
		})
	}
}

func TestGetTenant(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	got := mustCall(t, e.ctx, &cyclesv1.GetTenantRequest{TenantId: id}, e.svc.GetTenant).GetTenant()
	if got.GetTenantId() != id || got.GetName() != "Acme" {
		t.Fatalf("tenant = %v", got)
	}
	_, err := call(e.ctx, &cyclesv1.GetTenantRequest{TenantId: newTenantID(t)}, e.svc.GetTenant)
	wantRefused(t, err, codes.NotFound, apierr.TenantNotFound)
	_, err = call(e.ctx, &cyclesv1.GetTenantRequest{TenantId: "BAD"}, e.svc.GetTenant)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
}

func TestUpdateTenantChangesFieldsAndStatus(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	mustCall(t, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: id, Metadata: map[string]string{"a": "1", "b": "2"}}, e.svc.UpdateTenant)

	steps := []struct {
		name   string
		req    *cyclesv1.UpdateTenantRequest
		check  func(*cyclesv1.Tenant) bool
		events []string
	}{
		{"name", &cyclesv1.UpdateTenantRequest{Name: str("Acme Inc")},
			func(x *cyclesv1.Tenant) bool { return x.GetName() == "Acme Inc" }, []string{"tenant.updated"}},
		{"defaults", &cyclesv1.UpdateTenantRequest{DefaultReservationTtlMs: i64(2_000), MaxReservationTtlMs: i64(10_000), MaxReservationExtensions: i32(3),
			DefaultCommitOveragePolicy: cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT},
			func(x *cyclesv1.Tenant) bool {
				return x.GetDefaultReservationTtlMs() == 2_000 && x.GetMaxReservationTtlMs() == 10_000 && x.GetMaxReservationExtensions() == 3 &&
					x.GetDefaultCommitOveragePolicy() == cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_ALLOW_WITH_OVERDRAFT
			}, []string{"tenant.updated"}},
		{"max ttl 0 removes the cap", &cyclesv1.UpdateTenantRequest{MaxReservationTtlMs: i64(0)},
			func(x *cyclesv1.Tenant) bool { return x.GetMaxReservationTtlMs() == 0 }, []string{"tenant.updated"}},
		{"metadata merges", &cyclesv1.UpdateTenantRequest{Metadata: map[string]string{"b": "3", "c": "4"}},
			func(x *cyclesv1.Tenant) bool {
				return reflect.DeepEqual(x.GetMetadata(), map[string]string{"a": "1", "b": "3", "c": "4"})
			}, []string{"tenant.updated"}},
		{"metadata replaces", &cyclesv1.UpdateTenantRequest{Metadata: map[string]string{"z": "9"}, ReplaceMetadata: true},
			func(x *cyclesv1.Tenant) bool { return reflect.DeepEqual(x.GetMetadata(), map[string]string{"z": "9"}) }, []string{"tenant.updated"}},
		{"same metadata again is a no-op", &cyclesv1.UpdateTenantRequest{Metadata: map[string]string{"z": "9"}},
			func(x *cyclesv1.Tenant) bool { return reflect.DeepEqual(x.GetMetadata(), map[string]string{"z": "9"}) }, nil},
		{"suspend", &cyclesv1.UpdateTenantRequest{Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED},
			func(x *cyclesv1.Tenant) bool { return x.GetStatus() == cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED }, []string{"tenant.suspended"}},
		{"suspend again is a no-op", &cyclesv1.UpdateTenantRequest{Status: cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED},
			func(x *cyclesv1.Tenant) bool { return x.GetStatus() == cyclesv1.TenantStatus_TENANT_STATUS_SUSPENDED }, nil},
		{"reactivate with a name", &cyclesv1.UpdateTenantRequest{Status: cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE, Name: str("Acme")},
			func(x *cyclesv1.Tenant) bool {
				return x.GetStatus() == cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE && x.GetName() == "Acme"
			}, []string{"tenant.reactivated", "tenant.updated"}},
		{"empty update", &cyclesv1.UpdateTenantRequest{}, func(x *cyclesv1.Tenant) bool { return true }, nil},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := len(e.events(id))
			st.req.TenantId = id
			snap := e.snapshot(id)
			got := mustCall(t, e.ctx, st.req, e.svc.UpdateTenant).GetTenant()
			if !st.check(got) {
				t.Fatalf("tenant = %v", got)
			}
			if again := mustCall(t, e.ctx, &cyclesv1.GetTenantRequest{TenantId: id}, e.svc.GetTenant).GetTenant(); !proto.Equal(again, got) {
				t.Fatalf("stored %v != returned %v", again, got)
			}
			evs := e.events(id)[before:]
			if !reflect.DeepEqual(eventTypes(evs), st.events) && !(len(evs) == 0 && st.events == nil) {
				t.Fatalf("events = %v, want %v", eventTypes(evs), st.events)
			}
			if st.events == nil {
				e.unchanged(id, snap) // nothing changed, nothing written
			}
		})
	}
	evs := e.events(id)
	for _, ev := range evs {
		if ev.Type == "tenant.suspended" && (ev.Data["previous_status"] != "ACTIVE" || ev.Data["new_status"] != "SUSPENDED") {
			t.Fatalf("suspended event = %+v", ev)
		}
	}
	if n := e.metrics.Sum(t, "cycles.admin.tenants.updated", attribute.String("status", "SUSPENDED")); n != 2 {
		t.Fatalf("tenants.updated{SUSPENDED} = %d", n)
	}
}

func TestUpdateTenantRefusals(t *testing.T) {
	e := newEnv(t)
	active := e.createTenant()
	closed := e.createTenant()
	mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: closed}, e.svc.CloseTenant)
	cases := []refusal[*cyclesv1.UpdateTenantRequest]{
		{"status CLOSED", &cyclesv1.UpdateTenantRequest{TenantId: active, Status: cyclesv1.TenantStatus_TENANT_STATUS_CLOSED}, codes.InvalidArgument, apierr.InvalidRequest},
		{"unknown status", &cyclesv1.UpdateTenantRequest{TenantId: active, Status: 42}, codes.InvalidArgument, apierr.InvalidRequest},
		{"ttl too small", &cyclesv1.UpdateTenantRequest{TenantId: active, DefaultReservationTtlMs: i64(1)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"max ttl too small", &cyclesv1.UpdateTenantRequest{TenantId: active, MaxReservationTtlMs: i64(999)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"extensions too many", &cyclesv1.UpdateTenantRequest{TenantId: active, MaxReservationExtensions: i32(5000)}, codes.InvalidArgument, apierr.InvalidRequest},
		{"name too long", &cyclesv1.UpdateTenantRequest{TenantId: active, Name: str(strings.Repeat("x", 300))}, codes.InvalidArgument, apierr.InvalidRequest},
		{"bad tenant id", &cyclesv1.UpdateTenantRequest{TenantId: "No Such"}, codes.InvalidArgument, apierr.InvalidRequest},
		{"unknown tenant", &cyclesv1.UpdateTenantRequest{TenantId: newTenantID(t), Name: str("x")}, codes.NotFound, apierr.TenantNotFound},
		{"closed tenant", &cyclesv1.UpdateTenantRequest{TenantId: closed, Name: str("x")}, codes.FailedPrecondition, apierr.TenantClosed},
		{"closed tenant reactivate", &cyclesv1.UpdateTenantRequest{TenantId: closed, Status: cyclesv1.TenantStatus_TENANT_STATUS_ACTIVE}, codes.FailedPrecondition, apierr.TenantClosed},
	}
	refuseEach(e, t, cases, e.svc.UpdateTenant)
}

func TestCloseTenantReleasesThroughTheReleaser(t *testing.T) {
	rel := &fakeReleaser{plan: []int{CloseReleaseBatch, CloseReleaseBatch, 7}}
	e := newEnv(t, func(o *Options) { o.Releaser = rel })
	id := e.createTenant()

	resp := mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
	if resp.GetReleasedReservations() != 2*CloseReleaseBatch+7 {
		t.Fatalf("released = %d", resp.GetReleasedReservations())
	}
	tn := resp.GetTenant()
	if tn.GetStatus() != cyclesv1.TenantStatus_TENANT_STATUS_CLOSED || tn.ClosedAtMs == nil || tn.GetClosedAtMs() != tn.GetUpdatedAtMs() {
		t.Fatalf("tenant = %v", tn)
	}
	if want := []string{id + "/500", id + "/500", id + "/500"}; !reflect.DeepEqual(rel.calls, want) {
		t.Fatalf("releaser calls = %v, want %v", rel.calls, want)
	}
	if got := eventTypes(e.events(id)); !reflect.DeepEqual(got, []string{"tenant.created", "tenant.closed"}) {
		t.Fatalf("events = %v", got)
	}

	// Closing again: unchanged, released 0, no event, but the releaser is asked
	// again (it finishes an interrupted close).
	snap := e.snapshot(id)
	again := mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
	if again.GetReleasedReservations() != 0 || !proto.Equal(again.GetTenant(), tn) {
		t.Fatalf("second close = %v", again)
	}
	e.unchanged(id, snap)
	if len(rel.calls) != 4 {
		t.Fatalf("releaser calls = %v", rel.calls)
	}
	if n := e.metrics.Sum(t, "cycles.admin.tenants.closed"); n != 1 {
		t.Fatalf("tenants.closed = %d", n)
	}
	if n := e.metrics.Sum(t, "cycles.admin.tenant_close.released"); n != 2*CloseReleaseBatch+7 {
		t.Fatalf("tenant_close.released = %d", n)
	}

	// Mutations of a closed tenant are refused.
	_, err := call(e.ctx, &cyclesv1.CreateApiKeyRequest{TenantId: id}, e.svc.CreateApiKey)
	wantRefused(t, err, codes.FailedPrecondition, apierr.TenantClosed)
}

func TestCloseTenantFailureIsRetryable(t *testing.T) {
	boom := errors.New("ledger down")
	rel := &fakeReleaser{plan: []int{3, 4}, err: boom}
	e := newEnv(t, func(o *Options) { o.Releaser = rel })
	id := e.createTenant()
	_, err := call(e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the releaser's error", err)
	}
	// The flip happened: mutations are already blocked.
	if st := mustCall(t, e.ctx, &cyclesv1.GetTenantRequest{TenantId: id}, e.svc.GetTenant).GetTenant().GetStatus(); st != cyclesv1.TenantStatus_TENANT_STATUS_CLOSED {
		t.Fatalf("status = %v", st)
	}
	resp := mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
	if resp.GetReleasedReservations() != 7 {
		t.Fatalf("released on retry = %d", resp.GetReleasedReservations())
	}
}

func TestCloseTenantWithoutReleaserAndRefusals(t *testing.T) {
	e := newEnv(t)
	id := e.createTenant()
	resp := mustCall(t, e.ctx, &cyclesv1.CloseTenantRequest{TenantId: id}, e.svc.CloseTenant)
	if resp.GetReleasedReservations() != 0 || resp.GetTenant().GetStatus() != cyclesv1.TenantStatus_TENANT_STATUS_CLOSED {
		t.Fatalf("close = %v", resp)
	}
	unknown := newTenantID(t)
	refusedUnchanged(e, t, unknown, &cyclesv1.CloseTenantRequest{TenantId: unknown}, e.svc.CloseTenant, codes.NotFound, apierr.TenantNotFound)
	_, err := call(e.ctx, &cyclesv1.CloseTenantRequest{TenantId: ""}, e.svc.CloseTenant)
	wantRefused(t, err, codes.InvalidArgument, apierr.InvalidRequest)
}

// The registry entry is written before (and independently of) the record: even
// a create refused as a duplicate leaves the tenant registered, so no record
// can exist that the sweeper cannot find.
func TestCreateTenantRegistersBeforeTheRecord(t *testing.T) {
	e := newEnv(t)
	id := newTenantID(t)
	ctx := context.Background()
	// A record written without the registry (e.g. seeded before the registry existed).
	e.rdb.HSet(ctx, keys.Tenant(id).Record(), "tenant_id", id, "status", "ACTIVE")
	_, err := call(e.ctx, &cyclesv1.CreateTenantRequest{TenantId: id}, e.svc.CreateTenant)
	wantRefused(t, err, codes.AlreadyExists, apierr.DuplicateResource)
	if s := e.rdb.ZScore(ctx, keys.Tenants, id); s.Err() != nil {
		t.Fatalf("tenant not registered: %v", s.Err())
	}
}
