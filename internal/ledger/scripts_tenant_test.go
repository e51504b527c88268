package ledger_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// Tenant guards and tenant defaults, all read inside the scripts.
func TestScriptTenantGuards(t *testing.T) {
	t.Run("closed", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, s *sx) {
			ledgertest.SeedTenant(t, s.c, s.tenant, ledgertest.Tenant{})
			s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
			rid := s.mustReserve(rc{Est: "100", Scopes: []string{""}})
			ledgertest.SetTenantStatus(t, s.c, s.tenant, "CLOSED")
			before := s.dump()
			for name, err := range map[string]error{
				"reserve": second(s.reserve(rc{Est: "1", Scopes: []string{""}})),
				"commit":  second(s.commit(rid, "", "1", "c")),
				"release": second(s.release(rid, "r")),
				"extend":  second(s.extend(rid, "10", "x")),
				"event":   second(s.event(ec{Actual: "1", Scopes: []string{""}})),
			} {
				if !apierr.HasCode(err, apierr.TenantClosed) {
					t.Fatalf("%s: %v, want TENANT_CLOSED", name, err)
				}
			}
			if s.dump() != before {
				t.Fatal("TENANT_CLOSED refusals wrote something")
			}
			if o, err := s.reserve(rc{Mode: "dry", Est: "1", Scopes: []string{""}}); err != nil || o.Snap["reason_code"] != "TENANT_CLOSED" {
				t.Fatalf("dry run on a closed tenant: %+v %v", o, err)
			}
			if o, err := s.decide("1", "", ""); err != nil || o.Snap["reason_code"] != "TENANT_CLOSED" {
				t.Fatalf("decide on a closed tenant: %+v %v", o, err)
			}
		})
	})
	t.Run("suspended blocks new spending, not settlement", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, s *sx) {
			ledgertest.SeedTenant(t, s.c, s.tenant, ledgertest.Tenant{})
			s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
			a := s.mustReserve(rc{Est: "100", Scopes: []string{""}})
			b := s.mustReserve(rc{Est: "100", Scopes: []string{""}})
			ledgertest.SetTenantStatus(t, s.c, s.tenant, "SUSPENDED")
			_, err := s.reserve(rc{Est: "1", Scopes: []string{""}})
			wantCode(t, err, apierr.TenantSuspended)
			_, err = s.event(ec{Actual: "1", Scopes: []string{""}})
			wantCode(t, err, apierr.TenantSuspended)
			if o, err := s.reserve(rc{Mode: "dry", Est: "1", Scopes: []string{""}}); err != nil || o.Snap["reason_code"] != "TENANT_SUSPENDED" {
				t.Fatalf("dry run: %+v %v", o, err)
			}
			if _, err := s.extend(a, "10", "x"); err != nil {
				t.Fatalf("extend while suspended: %v", err)
			}
			if _, err := s.commit(a, "", "50", "c"); err != nil {
				t.Fatalf("commit while suspended: %v", err)
			}
			if _, err := s.release(b, "r"); err != nil {
				t.Fatalf("release while suspended: %v", err)
			}
		})
	})
	t.Run("malformed record fails closed", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, s *sx) {
			s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
			rid := s.mustReserve(rc{Est: "100", Scopes: []string{""}})
			ledgertest.SeedTenant(t, s.c, s.tenant, ledgertest.Tenant{Extra: map[string]string{"status": "on-holiday"}})
			for name, err := range map[string]error{
				"reserve": second(s.reserve(rc{Est: "1", Scopes: []string{""}})),
				"dry":     second(s.reserve(rc{Mode: "dry", Est: "1", Scopes: []string{""}})),
				"decide":  second(s.decide("1", "", "")),
				"commit":  second(s.commit(rid, "", "1", "c")),
				"release": second(s.release(rid, "r")),
				"event":   second(s.event(ec{Actual: "1", Scopes: []string{""}})),
			} {
				if !apierr.HasCode(err, apierr.InternalError) {
					t.Fatalf("%s: %v, want INTERNAL_ERROR", name, err)
				}
			}
		})
	})
	t.Run("defaults: ttl, ttl cap, policy", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, s *sx) {
			ledgertest.SeedTenant(t, s.c, s.tenant, ledgertest.Tenant{DefaultTTLms: 120_000, MaxTTLms: 300_000, DefaultPolicy: "REJECT"})
			s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
			o, err := s.reserve(rc{Est: "1", Scopes: []string{""}})
			if err != nil {
				t.Fatal(err)
			}
			rec := s.record(o.Snap["reservation_id"].(string))
			if atoi(rec["expires_at"])-atoi(rec["created_at"]) != 120_000 || o.RemTTL != "120000" || rec["policy"] != "REJECT" || o.Snap["policy"] != "REJECT" {
				t.Fatalf("tenant defaults not applied: %v rem_ttl %s", rec, o.RemTTL)
			}
			// A request above the tenant max is capped, and the response shows it.
			o, err = s.reserve(rc{Est: "1", TTL: "900000", Policy: "ALLOW_WITH_OVERDRAFT", Scopes: []string{""}})
			if err != nil {
				t.Fatal(err)
			}
			rec = s.record(o.Snap["reservation_id"].(string))
			if atoi(rec["expires_at"])-atoi(rec["created_at"]) != 300_000 || o.RemTTL != "300000" || rec["policy"] != "ALLOW_WITH_OVERDRAFT" {
				t.Fatalf("ttl cap / explicit policy: %v rem_ttl %s", rec, o.RemTTL)
			}
			if atoi(o.Snap["expires_at_ms"].(string)) != atoi(rec["expires_at"]) {
				t.Fatal("response expires_at_ms is not the effective expiry")
			}
			// An invalid tenant default policy is INVALID_REQUEST unless the
			// request names its policy.
			s.c.HSet(ctx, s.tk.Record(), "default_policy", "YOLO")
			_, err = s.reserve(rc{Est: "1", Scopes: []string{""}})
			wantCode(t, err, apierr.InvalidRequest)
			if _, err := s.reserve(rc{Est: "1", Policy: "REJECT", Scopes: []string{""}}); err != nil {
				t.Fatalf("explicit policy with a bad tenant default: %v", err)
			}
		})
	})
	t.Run("no tenant record: runtime-only defaults", func(t *testing.T) {
		eachBackend(t, func(t *testing.T, s *sx) {
			s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
			o, err := s.reserve(rc{Est: "1", TTL: "86400000", Scopes: []string{""}})
			if err != nil {
				t.Fatal(err)
			}
			rec := s.record(o.Snap["reservation_id"].(string))
			if o.RemTTL != "86400000" || rec["max_ext"] != "10" || rec["policy"] != "ALLOW_IF_AVAILABLE" {
				t.Fatalf("defaults without a tenant record: %v", rec)
			}
		})
	})
}

// Caps come from the budget at the deepest derived scope.
func TestScriptCaps(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		caps := `{"max_tokens":500,"tool_denylist":["shell"]}`
		s.budget(ledgertest.Budget{Scope: "", Allocated: 1000, Caps: `{"max_tokens":1}`})
		o, err := s.reserve(rc{Est: "1", Mode: "dry"})
		if err != nil || o.Snap["decision"] != "ALLOW" {
			t.Fatalf("caps above the deepest scope must not apply: %+v %v", o, err)
		}
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 1000, Caps: caps})
		o, err = s.reserve(rc{Est: "1"})
		if err != nil || o.Snap["decision"] != "ALLOW_WITH_CAPS" || o.Snap["caps"] != caps {
			t.Fatalf("reserve = %+v %v", o, err)
		}
		d, err := s.decide("1", "")
		if err != nil || d.Snap["decision"] != "ALLOW_WITH_CAPS" || d.Snap["caps"] != caps {
			t.Fatalf("decide = %+v %v", d, err)
		}
	})
}

// Events (direct debits) are never blocked by over-limit or debt; only by
// budget status and their own overage policy.
func TestScriptEventsNotBlockedByDebt(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 1000, Debt: 100, IsOverLimit: true})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 1000, Debt: 50})
		_, err := s.reserve(rc{Est: "1"})
		wantCode(t, err, apierr.OverdraftLimitExceeded)
		o, err := s.event(ec{Actual: "10"})
		if err != nil || o.Snap["status"] != "APPLIED" {
			t.Fatalf("event with debt and over-limit: %+v %v", o, err)
		}
		if _, has := o.Snap["charged"]; has {
			t.Fatal("charged must be absent when the full actual was charged")
		}
		s.wantL("", L{rem: 890, spent: 10, debt: 100, over: true})
		s.wantL("workspace:prod", L{rem: 940, spent: 10, debt: 50})

		// REJECT refuses when remaining < actual; ALLOW_IF_AVAILABLE caps.
		_, err = s.event(ec{Actual: "1000", Policy: "REJECT"})
		ae := wantCode(t, err, apierr.BudgetExceeded)
		if ae.Details["scope"] != s.path("") || ae.Details["remaining"] != "890" {
			t.Fatalf("details = %v", ae.Details)
		}
		o, err = s.event(ec{Actual: "1000", Policy: "ALLOW_IF_AVAILABLE"})
		if err != nil || o.Snap["charged"] != "890" {
			t.Fatalf("capped event: %+v %v", o, err)
		}
		s.wantL("workspace:prod", L{rem: 50, spent: 900, debt: 50, over: true})

		// Frozen / closed budgets do block events.
		ledgertest.PatchBalance(t, s.c, s.tk.Budget(s.path("workspace:prod"), "TOKENS"), map[string]string{"status": "FROZEN"})
		_, err = s.event(ec{Actual: "1"})
		wantCode(t, err, apierr.BudgetFrozen)
		ledgertest.PatchBalance(t, s.c, s.tk.Budget(s.path("workspace:prod"), "TOKENS"), map[string]string{"status": "CLOSED"})
		_, err = s.event(ec{Actual: "1"})
		wantCode(t, err, apierr.BudgetClosed)
	})
}

// The outbox: which operation emits what (docs/protocol.md#events), amounts as
// decimal strings, never on a replay.
func TestScriptOutboxEvents(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 1000})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 100})
		// Reserve draining the workspace: exhausted for that scope only.
		rid := s.mustReserve(rc{Key: "r1", Est: "100"})
		evs := ledgertest.Events(t, s.c, s.tenant)
		if len(evs) != 1 || evs[0]["type"] != "budget.exhausted" || evs[0]["scope"] != s.path("workspace:prod") || evs[0]["cat"] != "budget" {
			t.Fatalf("events after reserve = %v", evs)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(evs[0]["data"]), &data); err != nil {
			t.Fatal(err)
		}
		if data["remaining"] != "0" || data["reserved"] != "100" || data["allocated"] != "100" {
			t.Fatalf("exhausted data = %v (amounts must be decimal strings)", data)
		}
		if evs[0]["req"] != "req-1" || evs[0]["actor"] != "api_key" || !strings.HasPrefix(evs[0]["id"], "evt_") {
			t.Fatalf("envelope = %v", evs[0])
		}
		// Replays emit nothing.
		if _, err := s.reserve(rc{Key: "r1", Est: "100"}); err != nil {
			t.Fatal(err)
		}
		if n := len(s.events()); n != 1 {
			t.Fatalf("a replay emitted events: %d", n)
		}
		// Release emits nothing.
		if _, err := s.release(rid, "rel"); err != nil {
			t.Fatal(err)
		}
		// Dry-run DENY: reservation.denied at the scope path; decide DENY at
		// the tenant scope.
		if _, err := s.reserve(rc{Mode: "dry", Est: "5000"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.decide("5000", ""); err != nil {
			t.Fatal(err)
		}
		evs = ledgertest.Events(t, s.c, s.tenant)
		if len(evs) != 3 || evs[1]["type"] != "reservation.denied" || evs[1]["scope"] != s.path("workspace:prod") ||
			evs[2]["type"] != "reservation.denied" || evs[2]["scope"] != s.path("") || evs[1]["cat"] != "reservation" {
			t.Fatalf("denial events = %v", evs)
		}
		if err := json.Unmarshal([]byte(evs[1]["data"]), &data); err != nil {
			t.Fatal(err)
		}
		if data["reason_code"] != "BUDGET_EXCEEDED" || data["requested_amount"] != "5000" {
			t.Fatalf("denied data = %v", data)
		}
		// A live refusal emits nothing.
		_, err := s.reserve(rc{Est: "5000"})
		wantCode(t, err, apierr.BudgetExceeded)
		if n := len(s.events()); n != 3 {
			t.Fatalf("a live refusal emitted events")
		}
	})
}
