package ledger_test

import (
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// The scripts that settle a reservation by id apply the same scope-filter
// test as internal/scopefilter.Allows (lua/lib/scope_filter.lua), over the
// reservation's recorded scope: for every row the script refuses exactly when
// Allows refuses, and a refusal changes nothing.
func TestScriptScopeFilterMatchesAllows(t *testing.T) {
	subjects := []*cyclesv1.Subject{
		{},
		{Workspace: "prod"},
		{Workspace: "prod", Agent: "bot"},
		{Workspace: "ops", App: "x", Agent: "bot"},
		{Agent: "bot", Toolset: "t"},
	}
	filters := [][]string{
		{"workspace:prod"},
		{"agent:*"},
		{"workspace:prod/agent:bot"},
		{"workspace:ops", "toolset:*"},
		{"tenant:*"},
		{"workspace:*/app:x"},
		{"agent:other"},
	}
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 1_000_000})
		for _, subj := range subjects {
			d, err := scope.Derive(s.tenant, subj)
			if err != nil {
				t.Fatal(err)
			}
			segs, _, _ := scopefilter.Named(s.tenant, &cyclesv1.CreateReservationRequest{Subject: subj})
			rest := d.Path[len("tenant:"+s.tenant):]
			if rest != "" {
				rest = rest[1:]
			}
			for _, raw := range filters {
				filter, _, err := scopefilter.Check(s.tenant, raw)
				if err != nil {
					t.Fatal(err)
				}
				arg := ""
				for i, p := range filter {
					if i > 0 {
						arg += ","
					}
					arg += p
				}
				rid := s.mustReserve(rc{Est: "10", Scopes: []string{"", rest}})
				before := s.record(rid)
				_, err = s.release(rid, "rel", arg)
				if want := scopefilter.Allows(filter, segs); want {
					if err != nil {
						t.Errorf("%s under %v: release refused: %v", d.Path, filter, err)
					}
					continue
				}
				if ae := wantCode(t, err, apierr.Forbidden); ae.Details["scope"] != d.Path || ae.Details["reason"] != "scope_filter" {
					t.Errorf("%s under %v: details %v", d.Path, filter, ae.Details)
				}
				if after := s.record(rid); after["state"] != before["state"] || len(after) != len(before) {
					t.Errorf("%s under %v: a refused release changed the record: %v -> %v", d.Path, filter, before, after)
				}
				if _, err := s.release(rid, "rel"); err != nil {
					t.Fatalf("release without a filter: %v", err)
				}
			}
		}
	})
}
