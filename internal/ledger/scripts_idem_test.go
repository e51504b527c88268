package ledger_test

import (
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// Idempotency (docs/protocol.md#idempotency-and-replay): replays return the stored snapshot and change
// nothing, a different payload is IDEMPOTENCY_MISMATCH, failures are never
// remembered, namespaces are per tenant and endpoint, and a replay wins over
// the TENANT_CLOSED guard.
func TestScriptIdempotency(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})

		// Replay: same reservation, same bytes, held once.
		first, err := s.reserve(rc{Key: "k1", Est: "100", Scopes: []string{""}})
		if err != nil {
			t.Fatal(err)
		}
		before := s.dump()
		again, err := s.reserve(rc{Key: "k1", Est: "100", Scopes: []string{""}})
		if err != nil || !again.Replay || again.Resp != first.Resp {
			t.Fatalf("replay = %+v, %v", again, err)
		}
		if s.dump() != before {
			t.Fatal("a replay wrote something")
		}
		if s.st("").Reserved.Int64() != 100 {
			t.Fatal("a replay reserved twice")
		}
		// Different payload under the same key.
		_, err = s.reserve(rc{Key: "k1", Hash: "other", Est: "100", Scopes: []string{""}})
		wantCode(t, err, apierr.IdempotencyMismatch)
		// Live and dry run share the namespace: a dry body is a different payload.
		_, err = s.reserve(rc{Key: "k1", Hash: "dry-hash", Mode: "dry", Est: "100", Scopes: []string{""}})
		wantCode(t, err, apierr.IdempotencyMismatch)
		if s.dump() != before {
			t.Fatal("mismatches wrote something")
		}

		// Dry-run answers (even DENY) are remembered and replayed.
		d1, err := s.reserve(rc{Key: "dry1", Mode: "dry", Est: "5000", Scopes: []string{""}})
		if err != nil || d1.Snap["decision"] != "DENY" {
			t.Fatalf("dry = %+v %v", d1, err)
		}
		d2, err := s.reserve(rc{Key: "dry1", Mode: "dry", Est: "5000", Scopes: []string{""}})
		if err != nil || !d2.Replay || d2.Resp != d1.Resp {
			t.Fatalf("dry replay = %+v %v", d2, err)
		}

		// Failures are not remembered: after funding, the same key and
		// payload is evaluated afresh.
		_, err = s.reserve(rc{Key: "k2", Est: "2000", Scopes: []string{""}})
		wantCode(t, err, apierr.BudgetExceeded)
		ledgertest.AddToBalance(t, s.c, s.tk.Budget(s.path(""), "TOKENS"), map[string]int64{"allocated": 5000, "remaining": 5000})
		if o, err := s.reserve(rc{Key: "k2", Est: "2000", Scopes: []string{""}}); err != nil || o.Replay {
			t.Fatalf("retry after a failure: %+v %v", o, err)
		}

		// The same key on other endpoints is independent.
		if _, err := s.decide("100", "k1", ""); err != nil {
			t.Fatalf("decide with a reserve key: %v", err)
		}
		if _, err := s.event(ec{Key: "k1", Actual: "1", Scopes: []string{""}}); err != nil {
			t.Fatalf("event with a reserve key: %v", err)
		}
		// Event replay: same event id, charged once.
		spent := s.st("").Spent.Int64()
		ev, err := s.event(ec{Key: "k1", Actual: "1", Scopes: []string{""}})
		if err != nil || !ev.Replay || s.st("").Spent.Int64() != spent {
			t.Fatalf("event replay: %+v %v", ev, err)
		}
		_, err = s.event(ec{Key: "k1", Hash: "x", Actual: "1", Scopes: []string{""}})
		wantCode(t, err, apierr.IdempotencyMismatch)
		// Decide replay and mismatch.
		dd, err := s.decide("100", "k1", "")
		if err != nil || !dd.Replay {
			t.Fatalf("decide replay: %+v %v", dd, err)
		}

		// Another tenant with the same key is a different request.
		other := &sx{t: t, c: s.c, ex: s.ex, tenant: ledgertest.NewTenantID(t)}
		other.tk = keys.Tenant(other.tenant)
		other.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
		o, err := other.reserve(rc{Key: "k1", Est: "100", Scopes: []string{""}})
		if err != nil || o.Replay || o.Snap["reservation_id"] == first.Snap["reservation_id"] {
			t.Fatalf("other tenant, same key: %+v %v", o, err)
		}
		ledgertest.CheckInvariants(t, s.c, other.tenant)

		// Replays precede the closed-tenant guard; fresh requests do not.
		rid := first.Snap["reservation_id"].(string)
		commit, err := s.commit(rid, "", "100", "c1")
		if err != nil {
			t.Fatal(err)
		}
		ledgertest.SeedTenant(t, s.c, s.tenant, ledgertest.Tenant{Status: "CLOSED"})
		if o, err := s.reserve(rc{Key: "k1", Est: "100", Scopes: []string{""}}); err != nil || !o.Replay {
			t.Fatalf("reserve replay after close: %+v %v", o, err)
		}
		if o, err := s.commit(rid, "", "100", "c1"); err != nil || o.Resp != commit.Resp {
			t.Fatalf("commit replay after close: %+v %v", o, err)
		}
		_, err = s.reserve(rc{Key: "k9", Est: "1", Scopes: []string{""}})
		wantCode(t, err, apierr.TenantClosed)
		_, err = s.commit(rid, "", "100", "c2")
		wantCode(t, err, apierr.TenantClosed) // the guard precedes RESERVATION_FINALIZED
	})
}
