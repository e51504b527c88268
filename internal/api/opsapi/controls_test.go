package opsapi_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledgerops"
	"github.com/cyclesgo/cycles-go/internal/sweeper"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/grpctest"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// The pause flag is in Redis: one replica pauses, another sees it; resume
// clears it for both.
func TestPauseResumeAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	t.Cleanup(func() { _, _ = e.ops.ResumeSweeper(admin(), &cyclesv1.ResumeSweeperRequest{}) })
	p, err := e.ops.PauseSweeper(admin(), &cyclesv1.PauseSweeperRequest{Reason: "incident 42"})
	if err != nil || !p.GetPaused() || p.GetPausedAtMs() == 0 {
		t.Fatalf("pause %v %v", p, err)
	}
	again, err := e.ops.PauseSweeper(admin(), &cyclesv1.PauseSweeperRequest{Reason: "still 42"})
	if err != nil || again.GetPausedAtMs() != p.GetPausedAtMs() {
		t.Fatalf("a repeated pause keeps the first time: %v %v", again, err)
	}
	st, err := e.ops.GetSweeperStatus(admin(), &cyclesv1.GetSweeperStatusRequest{})
	if err != nil || !st.GetPaused() || st.GetPauseReason() != "still 42" {
		t.Fatalf("status %v %v", st, err)
	}
	ex2 := scripttest.Shared(t)
	other := sweeper.New(ex2, sweeper.Options{})
	if ps, err := other.PauseState(ctx); err != nil || !ps.Paused {
		t.Fatalf("another replica sees %+v %v", ps, err)
	}
	r, err := e.ops.ResumeSweeper(admin(), &cyclesv1.ResumeSweeperRequest{})
	if err != nil || !r.GetWasPaused() {
		t.Fatalf("resume %v %v", r, err)
	}
	if ps, err := other.PauseState(ctx); err != nil || ps.Paused {
		t.Fatalf("after resume another replica sees %+v %v", ps, err)
	}
	if r, err := e.ops.ResumeSweeper(admin(), &cyclesv1.ResumeSweeperRequest{}); err != nil || r.GetWasPaused() {
		t.Fatalf("second resume %v %v", r, err)
	}
}

// The record- and index-level kinds the incident suite does not make, each
// repaired (or not) as documented.
func TestIndexKindsAndRepair(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tk := keys.Tenant(e.tenant)
	for _, w := range []string{"a", "b", "c", "d", "q"} {
		e.budget(w)
	}
	unindexed, rescored, committed := e.reserve("a", 5), e.reserve("b", 6), e.reserve("c", 7)
	if _, err := e.rt.ReleaseReservation(asTenant(e), &cyclesv1.ReleaseReservationRequest{ReservationId: committed, IdempotencyKey: "rel"}); err != nil {
		t.Fatal(err)
	}
	// A quarantine made before the quarantine index existed.
	q := e.quarantined("q", 9, func(id string) { e.redis("HSET", tk.Reservation(id), "estimate", "x") })
	e.redis("ZREM", tk.Quarantine(), q)
	// A stale quarantine entry, an ACTIVE record out of the index, a wrong
	// score, and a terminal record that lost its TTL.
	e.redis("ZADD", tk.Quarantine(), 1, "res_gone")
	e.redis("ZREM", tk.Deadlines(), unindexed)
	e.redis("ZADD", tk.Deadlines(), 5, rescored)
	e.redis("PERSIST", tk.Reservation(committed))

	want := sorted("ACTIVE_NOT_INDEXED "+unindexed, "DEADLINE_SCORE_MISMATCH "+rescored, "TERMINAL_NO_TTL "+committed,
		"QUARANTINED "+q, "QUARANTINE_NOT_INDEXED "+q, "QUARANTINE_STALE res_gone")
	if got := discrepancies(e.audit().GetDiscrepancies()); !equal(got, want) {
		t.Fatalf("audit %v\nwant %v", got, want)
	}
	rep, err := e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: e.tenant, Apply: true, IdempotencyKey: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GetChanges()) != 5 || !equal(discrepancies(rep.GetUnrepaired()), []string{"QUARANTINED " + q}) {
		t.Fatalf("repair %v", rep)
	}
	if got := discrepancies(e.audit().GetDiscrepancies()); !equal(got, []string{"QUARANTINED " + q}) {
		t.Fatalf("after repair %v", got)
	}
	if ttl := e.c.PTTL(ctx, tk.Reservation(committed)).Val(); ttl <= 0 {
		t.Fatalf("terminal TTL %v", ttl)
	}
	// The repaired index entry is scored as the record says.
	exp, _ := strconv.ParseInt(e.field(tk.Reservation(unindexed), "expires_at"), 10, 64)
	grace, _ := strconv.ParseInt(e.field(tk.Reservation(unindexed), "grace_ms"), 10, 64)
	if s := e.c.ZScore(ctx, tk.Deadlines(), unindexed).Val(); int64(s) != exp+grace {
		t.Fatalf("score %v want %d", s, exp+grace)
	}
	if _, err := e.ops.ResolveQuarantined(admin(), releaseReq(e, q, e.ws("q"), 9)); err != nil {
		t.Fatal(err)
	}
	if got := e.audit().GetDiscrepancies(); len(got) != 0 {
		t.Fatalf("after resolving %v", discrepancies(got))
	}
	if v := ledgertest.Violations(ctx, e.c, e.tenant); len(v) > 0 {
		t.Fatalf("invariants: %v", v)
	}
}

// ListQuarantined pages within a tenant and across the registry.
func TestListQuarantinedPages(t *testing.T) {
	e := newEnv(t)
	tk := keys.Tenant(e.tenant)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, e.quarantined("p"+strconv.Itoa(i), 1, func(id string) { e.redis("HSET", tk.Reservation(id), "unit", "bad unit") }))
	}
	seen := map[string]bool{}
	token := ""
	for pages := 0; ; pages++ {
		resp, err := e.ops.ListQuarantined(admin(), &cyclesv1.ListQuarantinedRequest{TenantId: e.tenant, PageSize: 2, PageToken: token})
		if err != nil || pages > 3 {
			t.Fatalf("list %v %v", resp, err)
		}
		for _, r := range resp.GetReservations() {
			if r.GetReason() != "INVALID_ESTIMATE" || r.GetTenantId() != e.tenant {
				t.Fatalf("row %v", r)
			}
			seen[r.GetReservationId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(seen) != 3 {
		t.Fatalf("saw %v, want %v", seen, ids)
	}
	// All tenants (other tests' tenants share the registry): ours are all there.
	all := map[string]bool{}
	token = ""
	for pages := 0; pages < 1000; pages++ {
		resp, err := e.ops.ListQuarantined(admin(), &cyclesv1.ListQuarantinedRequest{PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetReservations() {
			if r.GetTenantId() == e.tenant {
				all[r.GetReservationId()] = true
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(all) != 3 {
		t.Fatalf("all-tenant listing saw %v of ours", all)
	}
	if _, err := e.ops.ListQuarantined(admin(), &cyclesv1.ListQuarantinedRequest{TenantId: e.tenant, PageToken: "%%"}); reasonOf(err) != "INVALID_REQUEST" {
		t.Fatalf("bad token: %v", err)
	}
}

// The background pass sets cycles.audit.discrepancies{kind} from its totals.
func TestBackgroundAuditGauge(t *testing.T) {
	e := newEnv(t)
	e.budget("g")
	e.reserve("g", 3)
	ledgertest.AddToBalance(e.t, e.c, keys.Tenant(e.tenant).Budget(e.ws("g"), "TOKENS"), map[string]int64{"reserved": 2})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	totals, err := e.svc.AuditAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if totals["RESERVED_MISMATCH"] < 1 {
		t.Fatalf("totals %v", totals)
	}
	if v, ok := e.mr.Gauge(t, "cycles.audit.discrepancies", attribute.String("kind", "RESERVED_MISMATCH")); !ok || v != totals["RESERVED_MISMATCH"] {
		t.Fatalf("gauge %v %v, totals %v", v, ok, totals)
	}
	if v, ok := e.mr.Gauge(t, "cycles.audit.discrepancies", attribute.String("kind", "TERMINAL_NO_TTL")); !ok || v != totals["TERMINAL_NO_TTL"] {
		t.Fatalf("every kind is exported (zero when absent): %v %v", v, ok)
	}
}

func asTenant(e *env) context.Context {
	return grpctest.AsTenant(context.Background(), e.tenant)
}

// A paused background loop skips its sweeps (due work stays due) until
// resumed; then it expires the work.
func TestPausedLoopSkipsSweeps(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tk := keys.Tenant(e.tenant)
	e.budget("due")
	id := e.reserve("due", 4)
	past := time.Now().UnixMilli() - 60_000
	if _, err := e.ops.PauseSweeper(admin(), &cyclesv1.PauseSweeperRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.ops.ResumeSweeper(admin(), &cyclesv1.ResumeSweeperRequest{}) })
	e.redis("HSET", tk.Reservation(id), "expires_at", strconv.FormatInt(past, 10), "grace_ms", "0")
	e.redis("ZADD", tk.Deadlines(), past, id)

	mr := telemetrytest.New()
	loop := sweeper.New(e.ex, sweeper.Options{Interval: 5 * time.Millisecond, MeterProvider: mr.Provider})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })

	waitFor(t, "two skipped sweeps", func() bool { return mr.Sum(t, "cycles.sweeper.paused_intervals") >= 2 })
	if st := e.field(tk.Reservation(id), "state"); st != "ACTIVE" || mr.Sum(t, "cycles.sweeper.sweeps") != 0 {
		t.Fatalf("a paused loop swept: state %s", st)
	}
	if _, err := e.ops.ResumeSweeper(admin(), &cyclesv1.ResumeSweeperRequest{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the expiry after resume", func() bool { return e.field(tk.Reservation(id), "state") == "EXPIRED" })
}

// waitFor polls cond (a wait for a background loop, not a speed assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Audits during live traffic report nothing: reserved and holds are compared
// inside one script, and every runtime script keeps records and indexes
// consistent at each step.
func TestAuditUnderLiveTrafficHasNoFalseAlarms(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 4; i++ {
		e.budget("live" + strconv.Itoa(i))
	}
	stop := make(chan struct{})
	done := make(chan error, 4)
	for w := 0; w < 4; w++ {
		go func(w int) {
			ctx := grpctest.AsTenant(context.Background(), e.tenant)
			for n := 0; ; n++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				r, err := e.rt.CreateReservation(ctx, &cyclesv1.CreateReservationRequest{
					IdempotencyKey: "live-" + strconv.Itoa(w) + "-" + strconv.Itoa(n), Subject: &cyclesv1.Subject{Workspace: "live" + strconv.Itoa(w)},
					Action: &cyclesv1.Action{Kind: "k", Name: "n"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
				if err != nil {
					done <- err
					return
				}
				if n%2 == 0 {
					_, err = e.rt.CommitReservation(ctx, &cyclesv1.CommitReservationRequest{ReservationId: r.GetReservationId(),
						IdempotencyKey: "c", Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
				} else if n%3 == 0 {
					_, err = e.rt.ReleaseReservation(ctx, &cyclesv1.ReleaseReservationRequest{ReservationId: r.GetReservationId(), IdempotencyKey: "r"})
				}
				if err != nil {
					done <- err
					return
				}
			}
		}(w)
	}
	for i := 0; i < 20; i++ {
		if got := e.audit().GetDiscrepancies(); len(got) != 0 {
			close(stop)
			t.Fatalf("audit %d under traffic: %v", i, discrepancies(got))
		}
	}
	close(stop)
	for w := 0; w < 4; w++ {
		if err := <-done; err != nil {
			t.Fatalf("traffic: %v", err)
		}
	}
	if v := ledgertest.Violations(context.Background(), e.c, e.tenant); len(v) > 0 {
		t.Fatalf("invariants: %v", v)
	}
}

// Above the one-script limit a mismatch two paged passes agree on is still
// reported (evidence "confirmed"), and the repair leaves that budget alone.
func TestMismatchAboveTheHoldsLimit(t *testing.T) {
	e := newEnvWith(t, redistest.SharedClient(t), ledgerops.Options{HoldsLimit: 2})
	e.budget("big")
	for i := 0; i < 3; i++ {
		e.reserve("big", int64(i+1))
	}
	ledgertest.AddToBalance(e.t, e.c, keys.Tenant(e.tenant).Budget(e.ws("big"), "TOKENS"), map[string]int64{"reserved": 1})
	var found *cyclesv1.AuditDiscrepancy
	for _, d := range e.audit().GetDiscrepancies() {
		if d.GetKind() == "RESERVED_MISMATCH" {
			found = d
		}
	}
	if found == nil || found.GetRepairable() || found.GetEvidence()["confirmed"] == "" ||
		found.GetEvidence()["reserved"] != "7" || found.GetEvidence()["sum_of_active_holds"] != "6" {
		t.Fatalf("mismatch above the limit: %v", found)
	}
	dry, err := e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: e.tenant})
	if err != nil || len(dry.GetChanges()) != 0 {
		t.Fatalf("repair above the limit %v %v", dry, err)
	}
}

// An operator call naming a tenant that does not exist is refused with
// TENANT_NOT_FOUND, not answered as a clean, empty tenant (a clean audit,
// applied: true, zero counts), and writes nothing.
func TestOpsOnUnknownTenantAreNotFound(t *testing.T) {
	e := newEnv(t)
	unknown := ledgertest.NewTenantID(t)
	cases := []struct {
		name string
		call func() error
	}{
		{"AuditTenant", func() error {
			return errtest.ErrOf(e.ops.AuditTenant(admin(), &cyclesv1.AuditTenantRequest{TenantId: unknown}))
		}},
		{"RepairTenant dry run", func() error {
			return errtest.ErrOf(e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: unknown}))
		}},
		{"RepairTenant apply", func() error {
			return errtest.ErrOf(e.ops.RepairTenant(admin(), &cyclesv1.RepairTenantRequest{TenantId: unknown, Apply: true, IdempotencyKey: "r-unknown"}))
		}},
		{"SweepTenant", func() error {
			return errtest.ErrOf(e.ops.SweepTenant(admin(), &cyclesv1.SweepTenantRequest{TenantId: unknown}))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			refusal(t, tc.call(), apierr.TenantNotFound)
			tk := keys.Tenant(unknown)
			for _, k := range []string{tk.Idempotency("repair", "r-unknown"), tk.Idempotency("repair", "dry-run"), tk.Record(), tk.Events()} {
				if n := e.c.Exists(context.Background(), k).Val(); n != 0 {
					t.Errorf("a refused call on an unknown tenant wrote %s", k)
				}
			}
		})
	}
	// The known tenant still answers.
	if _, err := e.ops.AuditTenant(admin(), &cyclesv1.AuditTenantRequest{TenantId: e.tenant}); err != nil {
		t.Fatalf("audit of a known tenant: %v", err)
	}
}
