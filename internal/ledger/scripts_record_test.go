package ledger_test

import (
	"strconv"
	"testing"

	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// Compact records (docs/design.md#reservation-records): a reservation keeps
// no stored copy of its reserve or commit answer, yet every replay answers
// with the original bytes — after an extend, after the commit, with caps and
// with affected scopes that are not the scope path's prefixes.
func TestScriptReplayFromCompactRecords(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 100000})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 50000, Caps: `{"max_tokens":77}`})

		for _, tc := range []struct {
			name   string
			scopes []string
		}{
			{"prefixes", []string{"", "workspace:prod"}},
			{"not prefixes", []string{"workspace:prod"}},
		} {
			first, err := s.reserve(rc{Key: "k-" + tc.name, Est: "100", TTL: "60000", Scopes: tc.scopes})
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if first.Snap["decision"] != "ALLOW_WITH_CAPS" {
				t.Fatalf("%s: decision %v", tc.name, first.Snap["decision"])
			}
			rid := first.Snap["reservation_id"].(string)
			rec := s.c.HGetAll(ctx, s.tk.Reservation(rid)).Val()
			for _, gone := range []string{"reserve_resp", "commit_resp", "metadata"} {
				if _, ok := rec[gone]; ok {
					t.Fatalf("%s: record stores %s", tc.name, gone)
				}
			}
			if _, ok := rec["affected"]; ok != (tc.name == "not prefixes") {
				t.Fatalf("%s: affected stored = %v", tc.name, ok)
			}
			if _, err := s.extend(rid, "5000", "x-"+tc.name); err != nil {
				t.Fatal(err)
			}
			again, err := s.reserve(rc{Key: "k-" + tc.name, Est: "100", TTL: "60000", Scopes: tc.scopes})
			if err != nil || !again.Replay || again.Resp != first.Resp {
				t.Fatalf("%s: replay after extend = %+v, %v; want %s", tc.name, again, err, first.Resp)
			}
			// remaining_ttl_ms counts down to the original expiry, not the extended one.
			if rem, _ := strconv.Atoi(again.RemTTL); rem <= 0 || rem > 60000 {
				t.Fatalf("%s: replay rem_ttl %s", tc.name, again.RemTTL)
			}
			commit, err := s.commit(rid, "", "60", "c-"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			for _, gone := range []string{"commit_resp", "committed_metadata", "metrics"} {
				if _, ok := s.c.HGetAll(ctx, s.tk.Reservation(rid)).Val()[gone]; ok {
					t.Fatalf("%s: committed record stores %s", tc.name, gone)
				}
			}
			before := s.dump()
			c2, err := s.commit(rid, "", "60", "c-"+tc.name)
			if err != nil || !c2.Replay || c2.Resp != commit.Resp {
				t.Fatalf("%s: commit replay = %+v, %v; want %s", tc.name, c2, err, commit.Resp)
			}
			r3, err := s.reserve(rc{Key: "k-" + tc.name, Est: "100", TTL: "60000", Scopes: tc.scopes})
			if err != nil || !r3.Replay || r3.Resp != first.Resp || r3.RemTTL != "0" {
				t.Fatalf("%s: reserve replay after commit = %+v, %v", tc.name, r3, err)
			}
			if s.dump() != before {
				t.Fatalf("%s: a replay wrote something", tc.name)
			}
		}
	})
}
