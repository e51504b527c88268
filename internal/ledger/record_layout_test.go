package ledger_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// A typical record is listpack-encoded (every value within Redis' default
// hash-max-listpack-value of 64 bytes) and stores nothing the key or the
// scope path implies; it is read, settled and replayed from those values
// alone (the only layout: docs/design.md#reservation-records).
func TestRecordLayoutCompact(t *testing.T) {
	e := newEnv(t)
	for _, s := range []string{"", "workspace:prod", "workspace:prod/agent:a"} {
		e.budget(ledgertest.Budget{Scope: e.scope(s), Allocated: 1_000_000_000_000})
	}
	subj := withSubject(&cyclesv1.Subject{Workspace: "prod", Agent: "a"})
	reserved := map[string]*cyclesv1.CreateReservationResponse{}
	for _, k := range []string{"a", "b", "c"} {
		reserved[k] = e.mustReserve(k, 1000, subj)
	}
	rid := func(k string) string { return reserved[k].GetReservationId() }
	key := func(k string) string { return keys.Tenant(e.tenant).Reservation(rid(k)) }

	// The compact layout.
	rec := e.c.HGetAll(ctx, key("a")).Val()
	for _, gone := range []string{"id", "subject", "affected", "tenant"} {
		if _, ok := rec[gone]; ok {
			t.Errorf("record stores %s", gone)
		}
	}
	if rec["budgeted"] != "123" || rec["rb1"] == "" || rec["rb3"] == "" {
		t.Errorf("record = %v", rec)
	}
	for f, v := range rec {
		if len(v) > 64 {
			t.Errorf("field %s is %d bytes: %s", f, len(v), v)
		}
	}
	if enc := e.c.ObjectEncoding(ctx, key("a")).Val(); enc != "listpack" {
		t.Errorf("record encoding = %s, want listpack", enc)
	}

	get := func(k string) *cyclesv1.Reservation {
		t.Helper()
		g, err := e.l.Get(ctx, e.tenant, &cyclesv1.GetReservationRequest{ReservationId: rid(k)})
		if err != nil {
			t.Fatal(err)
		}
		return g.GetReservation()
	}
	list := func() []*cyclesv1.Reservation {
		t.Helper()
		l, err := e.l.List(ctx, e.tenant, &cyclesv1.ListReservationsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return l.GetReservations()
	}
	sameList := func(what string, a, b []*cyclesv1.Reservation) {
		t.Helper()
		if len(a) != len(b) {
			t.Fatalf("%s: %d rows vs %d", what, len(a), len(b))
		}
		for i := range a {
			if !proto.Equal(a[i], b[i]) {
				t.Fatalf("%s: row %d\n%v\nvs\n%v", what, i, a[i], b[i])
			}
		}
	}
	replayReserve := func(k string) {
		t.Helper()
		req := reserveReq(k, &cyclesv1.Subject{Workspace: "prod", Agent: "a"}, 1000)
		again, err := e.l.Reserve(ctx, e.tenant, req)
		if err != nil {
			t.Fatal(err)
		}
		want := proto.Clone(reserved[k]).(*cyclesv1.CreateReservationResponse)
		want.RemainingTtlMs, again.RemainingTtlMs = nil, nil
		if !proto.Equal(again, want) {
			t.Fatalf("reserve replay of %s:\n%v\nwant\n%v", k, again, want)
		}
	}

	compactA, compactAll := get("a"), list()
	if g := compactA; g.GetSubject().GetTenant() != e.tenant || g.GetSubject().GetAgent() != "a" ||
		fmt.Sprint(g.GetBudgetedScopes()) != fmt.Sprint([]string{e.scope(""), e.scope("workspace:prod"), e.scope("workspace:prod/agent:a")}) {
		t.Fatalf("compact record read as %v", g)
	}
	sameList("list read twice", list(), compactAll)
	replayReserve("a")

	// Settling: commit (and its replay, rebuilt from the cb<i> rows),
	// release, extend.
	commit, err := e.commit(rid("a"), "ca", 700)
	if err != nil {
		t.Fatal(err)
	}
	committed := get("a")
	again, err := e.commit(rid("a"), "ca", 700)
	if err != nil || !proto.Equal(again, commit) {
		t.Fatalf("commit replay = %v, %v; want %v", again, err, commit)
	}
	replayReserve("a")
	if !proto.Equal(get("a"), committed) {
		t.Fatalf("committed record reads as\n%v\nwant\n%v", get("a"), committed)
	}
	released, err := e.release(rid("b"), "rb")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := e.release(rid("b"), "rb"); err != nil || !proto.Equal(again, released) {
		t.Fatalf("release replay = %v, %v; want %v", again, err, released)
	}
	// A compact record stays compact when released; its replay is rebuilt.
	reserved["d"] = e.mustReserve("d", 1000, subj)
	released, err = e.release(rid("d"), "rd")
	if err != nil {
		t.Fatal(err)
	}
	if rec := e.c.HGetAll(ctx, key("d")).Val(); rec["lb3"] == "" {
		t.Fatalf("released record = %v", rec)
	}
	if enc := e.c.ObjectEncoding(ctx, key("d")).Val(); enc != "listpack" {
		t.Errorf("released record encoding = %s, want listpack", enc)
	}
	if again, err := e.release(rid("d"), "rd"); err != nil || !proto.Equal(again, released) {
		t.Fatalf("release replay = %v, %v; want %v", again, err, released)
	}
	if _, err := e.l.Extend(ctx, e.tenant, &cyclesv1.ExtendReservationRequest{ReservationId: rid("c"), IdempotencyKey: "xc", ExtendByMs: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.commit(rid("c"), "cc", 1500); err != nil {
		t.Fatal(err)
	}
	replayReserve("c")
	for _, s := range []string{"", "workspace:prod", "workspace:prod/agent:a"} {
		if st := e.state(s); st.Reserved.Int64() != 0 || st.Spent.Int64() != 2200 {
			t.Fatalf("%q: %+v", s, st)
		}
	}
}

// A reserve whose subject the scope path implies passes it to the script as
// an empty string; a dry run's DENY event still carries the whole subject, as a subject
// that is stored does.
func TestDeniedEventCarriesImpliedSubject(t *testing.T) {
	e := newFundedEnv(t, 10)
	for _, subj := range []*cyclesv1.Subject{
		{Workspace: "prod", Agent: "a"},                              // implied by the path
		{Workspace: "Prod", Dimensions: map[string]string{"x": "y"}}, // stored as given
	} {
		before := len(ledgertest.Events(t, e.c, e.tenant))
		d, err := e.reserve("dry-"+subj.GetWorkspace(), 100, withSubject(subj), func(q *cyclesv1.CreateReservationRequest) { q.DryRun = true })
		if err != nil || d.GetDecision() != cyclesv1.Decision_DECISION_DENY {
			t.Fatalf("dry run = %v, %v", d, err)
		}
		evs := ledgertest.Events(t, e.c, e.tenant)[before:]
		if len(evs) != 1 || evs[0]["type"] != "reservation.denied" {
			t.Fatalf("events = %v", evs)
		}
		var data struct {
			Subject map[string]any `json:"subject"`
		}
		if err := json.Unmarshal([]byte(evs[0]["data"]), &data); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"tenant": e.tenant, "workspace": subj.GetWorkspace()}
		if subj.GetAgent() != "" {
			want["agent"] = subj.GetAgent()
		}
		if len(subj.GetDimensions()) > 0 {
			want["dimensions"] = map[string]any{"x": "y"}
		}
		if fmt.Sprint(data.Subject) != fmt.Sprint(want) {
			t.Fatalf("denied event subject = %v, want %v", data.Subject, want)
		}
	}
}
