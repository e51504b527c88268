package scopefilter_test

import (
	"reflect"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string
		bad  int // index of the offending pattern; -1: valid
	}{
		{"empty", nil, []string{}, -1},
		{"levels and wildcards", []string{"workspace:Eng", "agent:*", "tenant:acme/app:x"}, []string{"workspace:eng", "agent:*", "tenant:acme/app:x"}, -1},
		{"any tenant segment", []string{"tenant:*/workspace:a"}, []string{"tenant:*/workspace:a"}, -1},
		{"other tenant", []string{"tenant:other"}, nil, 0},
		{"unknown level", []string{"agent:a", "team:x"}, nil, 1},
		{"order", []string{"agent:a/workspace:b"}, nil, 0},
		{"repeated level", []string{"agent:a/agent:b"}, nil, 0},
		{"no value", []string{"workspace:"}, nil, 0},
		{"bad value", []string{"workspace:a b"}, nil, 0},
		{"not a segment", []string{"workspace"}, nil, 0},
		{"empty pattern", []string{""}, nil, 0},
		{"duplicate after lowercasing", []string{"agent:A", "agent:a"}, nil, 1},
		{"too many", make([]string, scopefilter.MaxPatterns+1), nil, scopefilter.MaxPatterns},
	} {
		got, i, err := scopefilter.Check("acme", tc.in)
		switch {
		case tc.bad < 0 && (err != nil || !reflect.DeepEqual(got, tc.want)):
			t.Errorf("%s: Check = %q, %v; want %q", tc.name, got, err, tc.want)
		case tc.bad >= 0 && (err == nil || i != tc.bad):
			t.Errorf("%s: Check = %d, %v; want a refusal of pattern %d", tc.name, i, err, tc.bad)
		}
	}
}

func TestAllows(t *testing.T) {
	subj := func(ws, agent string) *cyclesv1.Subject {
		return &cyclesv1.Subject{Tenant: "acme", Workspace: ws, Agent: agent}
	}
	for _, tc := range []struct {
		name   string
		filter []string
		req    any
		ok     bool
	}{
		{"no filter", nil, &cyclesv1.CreateReservationRequest{Subject: subj("", "")}, true},
		{"workspace itself", []string{"workspace:eng"}, &cyclesv1.CreateReservationRequest{Subject: subj("eng", "")}, true},
		{"below the workspace", []string{"workspace:eng"}, &cyclesv1.DecideRequest{Subject: subj("Eng", "bot")}, true},
		{"other workspace", []string{"workspace:eng"}, &cyclesv1.CreateEventRequest{Subject: subj("ops", "bot")}, false},
		{"tenant root", []string{"workspace:eng"}, &cyclesv1.CreateReservationRequest{Subject: subj("", "")}, false},
		{"any agent", []string{"agent:*"}, &cyclesv1.CreateReservationRequest{Subject: subj("ops", "bot")}, true},
		{"no agent", []string{"agent:*"}, &cyclesv1.CreateReservationRequest{Subject: subj("ops", "")}, false},
		{"second pattern", []string{"workspace:eng", "agent:bot"}, &cyclesv1.CreateReservationRequest{Subject: subj("ops", "bot")}, true},
		{"two segments", []string{"workspace:eng/agent:bot"}, &cyclesv1.CreateReservationRequest{Subject: subj("eng", "other")}, false},
		{"tenant pattern", []string{"tenant:acme"}, &cyclesv1.CreateReservationRequest{Subject: subj("", "")}, true},
		{"balances filter within", []string{"workspace:eng"}, &cyclesv1.GetBalancesRequest{Workspace: "eng"}, true},
		{"balances unfiltered", []string{"workspace:eng"}, &cyclesv1.GetBalancesRequest{}, false},
		{"list by agent only", []string{"workspace:eng"}, &cyclesv1.ListReservationsRequest{Agent: "bot"}, false},
		{"list within", []string{"agent:*"}, &cyclesv1.ListReservationsRequest{Agent: "bot"}, true},
		{"event log prefix within", []string{"workspace:eng"}, &cyclesv1.ListEventsRequest{ScopePrefix: "tenant:acme/workspace:eng"}, true},
		{"event log whole tenant", []string{"workspace:eng"}, &cyclesv1.ListEventsRequest{}, false},
		{"watch other prefix", []string{"workspace:eng"}, &cyclesv1.WatchEventsRequest{ScopePrefix: "tenant:acme/workspace:ops"}, false},
	} {
		segs, field, named := scopefilter.Named("acme", tc.req)
		if !named {
			t.Fatalf("%s: %T names no scope", tc.name, tc.req)
		}
		if got := scopefilter.Allows(tc.filter, segs); got != tc.ok {
			t.Errorf("%s: Allows(%q, %s) = %v, want %v", tc.name, tc.filter, segs.Path(), got, tc.ok)
		}
		if e, _ := apierr.As(scopefilter.Refusal(field, segs)); e.Code != apierr.Forbidden || e.Details["field"] == "" || e.Details["scope"] != segs.Path() {
			t.Errorf("%s: refusal %v", tc.name, e)
		}
	}
	// A request naming no scope is not this check's business.
	if _, _, named := scopefilter.Named("acme", &cyclesv1.GetReservationRequest{ReservationId: "r"}); named {
		t.Error("GetReservationRequest names a scope")
	}
	// A reservation read by id is judged on its answer.
	segs, ok := scopefilter.Answered("acme", &cyclesv1.GetReservationResponse{Reservation: &cyclesv1.Reservation{ScopePath: "tenant:acme/workspace:ops"}})
	if !ok || scopefilter.Allows([]string{"workspace:eng"}, segs) || !scopefilter.Allows([]string{"workspace:ops"}, segs) {
		t.Errorf("Answered: %v %v", segs, ok)
	}
}
