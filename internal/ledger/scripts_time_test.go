package ledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// expireLikeSweeper does what the sweeper's expire script does to one
// reservation (state EXPIRED, hold returned, out of the deadline index).
func (s *sx) expireLikeSweeper(rid string) {
	s.t.Helper()
	r := s.record(rid)
	est := atoi(r["estimate"])
	for _, p := range []string{s.path(""), s.path("workspace:prod")} {
		k := s.tk.Budget(p, "TOKENS")
		if n, _ := s.c.Exists(ctx, k).Result(); n == 0 {
			continue
		}
		ledgertest.AddToBalance(s.t, s.c, k, map[string]int64{"reserved": -est, "remaining": est})
	}
	s.c.HSet(ctx, s.tk.Reservation(rid), "state", "EXPIRED", "expired_at", itoa(redisNow(s.t, s.c)))
	s.c.ZRem(ctx, s.tk.Deadlines(), rid)
}

// Grace: commit and release are accepted through expires_at + grace, then
// RESERVATION_EXPIRED even before any sweep; extend gets no grace; a swept
// (EXPIRED) reservation is RESERVATION_EXPIRED for everything.
func TestScriptGraceAndExpiry(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 10_000})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 10_000})

		// In grace (expired 1 s ago, grace 5 s): commit and release succeed,
		// extend does not.
		inGraceC := s.mustReserve(rc{Est: "100"})
		inGraceR := s.mustReserve(rc{Est: "100"})
		inGraceE := s.mustReserve(rc{Est: "100"})
		for _, rid := range []string{inGraceC, inGraceR, inGraceE} {
			s.shiftExpiry(rid, -1000)
		}
		if _, err := s.commit(inGraceC, "", "100", "c"); err != nil {
			t.Fatalf("commit in grace: %v", err)
		}
		if _, err := s.release(inGraceR, "r"); err != nil {
			t.Fatalf("release in grace: %v", err)
		}
		_, err := s.extend(inGraceE, "1000", "x")
		wantCode(t, err, apierr.ReservationExpired)

		// Past expires_at + grace but not swept: every settlement is refused
		// by the time check, and nothing changes.
		past := s.mustReserve(rc{Est: "100"})
		s.shiftExpiry(past, -5001)
		before := s.dump()
		_, err = s.commit(past, "", "10", "c")
		wantCode(t, err, apierr.ReservationExpired)
		_, err = s.release(past, "r")
		wantCode(t, err, apierr.ReservationExpired)
		_, err = s.extend(past, "1000", "x")
		wantCode(t, err, apierr.ReservationExpired)
		if s.dump() != before {
			t.Fatal("refusals after the grace window wrote something")
		}

		// Swept: state EXPIRED wins even inside the window.
		swept := s.mustReserve(rc{Est: "100"})
		s.expireLikeSweeper(swept)
		for name, err := range map[string]error{
			"commit":  second(s.commit(swept, "", "10", "c")),
			"release": second(s.release(swept, "r")),
			"extend":  second(s.extend(swept, "10", "x")),
		} {
			if !apierr.HasCode(err, apierr.ReservationExpired) {
				t.Fatalf("%s on EXPIRED: %v", name, err)
			}
		}
		// A wrong-unit commit on an expired-but-unswept reservation is
		// UNIT_MISMATCH (state and unit checks precede the time check).
		_, err = s.commit(past, "CREDITS", "10", "c")
		wantCode(t, err, apierr.UnitMismatch)
	})
}

func second[T any](_ T, err error) error { return err }

// The real clock: ttl 1000 ms and grace 0, one short sleep.
func TestScriptShortTTLRealClock(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 10_000})
		// A commit inside the ttl succeeds. On a loaded machine the reserve
		// and the commit may straddle the second: such an attempt proves
		// nothing, so only a commit that ended (by Redis TIME) before the
		// deadline may fail the test, and an inconclusive one is retried.
		for attempt := 1; ; attempt++ {
			early := s.mustReserve(rc{Est: "100", TTL: "1000", Grace: "0", Scopes: []string{""}})
			_, err := s.commit(early, "", "100", "c")
			if err == nil {
				break
			}
			if ended, exp := redisNow(t, s.c), atoi(s.record(early)["expires_at"]); ended <= exp {
				t.Fatalf("commit ended at %d, inside the ttl (expires_at %d): %v", ended, exp, err)
			}
			s.expireLikeSweeper(early)
			if attempt == 5 {
				t.Skipf("5 attempts straddled the 1 s ttl (machine too loaded to test the real clock): %v", err)
			}
		}
		late := s.mustReserve(rc{Est: "100", TTL: "1000", Grace: "0", Scopes: []string{""}})
		lateRel := s.mustReserve(rc{Est: "100", TTL: "1000", Grace: "0", Scopes: []string{""}})
		// Past both deadlines: lateRel is reserved after late, on a loaded
		// machine some milliseconds after it, so its deadline may be later.
		exp := max(atoi(s.record(late)["expires_at"]), atoi(s.record(lateRel)["expires_at"]))
		for redisNow(t, s.c) <= exp {
			time.Sleep(time.Duration(exp-redisNow(t, s.c)+5) * time.Millisecond)
		}
		_, err := s.commit(late, "", "100", "c")
		wantCode(t, err, apierr.ReservationExpired)
		_, err = s.release(lateRel, "r")
		wantCode(t, err, apierr.ReservationExpired)
		// Leave the ledger sound for the invariant check: what the sweeper does.
		s.expireLikeSweeper(late)
		s.expireLikeSweeper(lateRel)
	})
}

// Redis TIME is the only clock: a bogus time passed as extra ARGV is ignored
// by every script, and an event's client_time_ms is stored, never used.
func TestScriptRedisTimeOnly(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 10_000})
		s.budget(ledgertest.Budget{Scope: "workspace:prod", Allocated: 10_000})
		const bogusFuture, bogusPast = "99999999999999", "1"

		t0 := redisNow(t, s.c)
		rid := s.mustReserve(rc{Est: "100", TTL: "60000", Extra: []any{bogusPast, bogusFuture}})
		rec := s.record(rid)
		t1 := redisNow(t, s.c)
		if c := atoi(rec["created_at"]); c < t0 || c > t1 || atoi(rec["expires_at"]) != c+60000 {
			t.Fatalf("created_at %s expires_at %s not from Redis TIME [%d,%d]", rec["created_at"], rec["expires_at"], t0, t1)
		}

		// Past its window: commit and release (whose bindings take no time,
		// and whose only variadic ARGV are archived record pairs) refuse by
		// Redis TIME.
		s.shiftExpiry(rid, -10_000)
		_, err := s.commit(rid, "", "10", "c")
		wantCode(t, err, apierr.ReservationExpired)
		_, err = s.release(rid, "r")
		wantCode(t, err, apierr.ReservationExpired)
		// Inside its window: a "now" in the far future does not expire it.
		ok := s.mustReserve(rc{Est: "100", Extra: []any{bogusFuture}})
		if _, err := s.extend(ok, "1000", "x", bogusFuture); err != nil {
			t.Fatalf("extend with a bogus future ARGV: %v", err)
		}
		if _, err := s.commit(ok, "", "10", "c"); err != nil {
			t.Fatalf("commit inside its window: %v", err)
		}

		// client_time_ms is advisory: stored verbatim, created_at is server time.
		o, err := s.event(ec{Actual: "5", ClientTime: bogusPast})
		if err != nil {
			t.Fatal(err)
		}
		ev, _ := s.c.HGetAll(ctx, s.tk.Event(o.Snap["event_id"].(string))).Result()
		if ev["client_time_ms"] != bogusPast || atoi(ev["created_at"]) < t0 {
			t.Fatalf("event record = %v", ev)
		}
		s.expireLikeSweeper(rid)
	})
}

// Finalized reservations: a different key is RESERVATION_FINALIZED for
// commit, release and extend; the same key replays; commit and release keys
// never collide. Terminal records leave the deadline index and expire.
func TestScriptFinalized(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		s.budget(ledgertest.Budget{Scope: "", Allocated: 10_000})
		c := s.mustReserve(rc{Est: "100", Scopes: []string{""}})
		first, err := s.commit(c, "", "70", "k1")
		if err != nil {
			t.Fatal(err)
		}
		before := s.dump()
		again, err := s.commit(c, "", "70", "k1")
		if err != nil || !again.Replay || again.Resp != first.Resp {
			t.Fatalf("same-key commit should replay verbatim: %+v %v", again, err)
		}
		_, err = s.commit(c, "", "71", "k1")
		wantCode(t, err, apierr.IdempotencyMismatch)
		_, err = s.commit(c, "", "70", "k2")
		wantCode(t, err, apierr.ReservationFinalized)
		_, err = s.release(c, "k1") // a release key never matches a commit
		wantCode(t, err, apierr.ReservationFinalized)
		_, err = s.extend(c, "10", "k1")
		wantCode(t, err, apierr.ReservationFinalized)
		if s.dump() != before {
			t.Fatal("replays and refusals on a committed reservation wrote something")
		}

		r := s.mustReserve(rc{Est: "100", Scopes: []string{""}})
		rel, err := s.release(r, "k1")
		if err != nil {
			t.Fatal(err)
		}
		if again, err := s.release(r, "k1"); err != nil || !again.Replay || again.Resp != rel.Resp {
			t.Fatalf("same-key release should replay: %v", err)
		}
		_, err = s.release(r, "k2")
		wantCode(t, err, apierr.ReservationFinalized)
		_, err = s.commit(r, "", "10", "k1")
		wantCode(t, err, apierr.ReservationFinalized)

		for _, rid := range []string{c, r} {
			if _, err := s.c.ZScore(ctx, s.tk.Deadlines(), rid).Result(); !errors.Is(err, redis.Nil) {
				t.Fatalf("%s still in the deadline index", rid)
			}
			ttl, _ := s.c.PTTL(ctx, s.tk.Reservation(rid)).Result()
			if ttl < 29*24*time.Hour || ttl > 30*24*time.Hour {
				t.Fatalf("terminal record TTL = %v, want 30 days", ttl)
			}
		}
		if _, err := s.commit("no-such-id", "", "1", "k"); !apierr.HasCode(err, apierr.NotFound) {
			t.Fatalf("unknown id: %v", err)
		}
	})
}

// Extend: relative to the current expiry, re-scores the deadline index,
// counts toward max_ext (snapshotted from the tenant), replays by key.
func TestScriptExtend(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *sx) {
		two := 2
		ledgertest.SeedTenant(t, s.c, s.tenant, ledgertest.Tenant{MaxExtensions: &two})
		s.budget(ledgertest.Budget{Scope: "", Allocated: 10_000})
		rid := s.mustReserve(rc{Est: "100", TTL: "60000", Grace: "2000", Scopes: []string{""}})
		// A later change of the tenant setting does not affect this reservation.
		s.c.HSet(ctx, s.tk.Record(), "max_extensions", "50")
		exp0 := atoi(s.record(rid)["expires_at"])
		bal0 := s.st("")

		o, err := s.extend(rid, "1500", "x1")
		if err != nil {
			t.Fatal(err)
		}
		if atoi(o.Snap["expires_at_ms"].(string)) != exp0+1500 || o.Snap["extension_count"] != "1" {
			t.Fatalf("extend = %v, want expires %d count 1", o.Snap, exp0+1500)
		}
		if rem := atoi(o.RemTTL); rem <= 60000 || rem > 61500 {
			t.Fatalf("remaining ttl = %d", rem)
		}
		score, _ := s.c.ZScore(ctx, s.tk.Deadlines(), rid).Result()
		if int64(score) != exp0+1500+2000 {
			t.Fatalf("deadline score = %.0f, want expires_at + grace", score)
		}
		replay, err := s.extend(rid, "1500", "x1")
		if err != nil || !replay.Replay || replay.Resp != o.Resp {
			t.Fatalf("replay: %+v %v", replay, err)
		}
		if atoi(s.record(rid)["expires_at"]) != exp0+1500 {
			t.Fatal("a replayed extend moved the expiry again")
		}
		_, err = s.extend(rid, "999", "x1")
		wantCode(t, err, apierr.IdempotencyMismatch)

		if _, err := s.extend(rid, "100", "x2"); err != nil {
			t.Fatal(err)
		}
		before := s.dump()
		_, err = s.extend(rid, "100", "x3")
		ae := wantCode(t, err, apierr.MaxExtensionsExceeded)
		if ae.Details["max_extensions"] != "2" {
			t.Fatalf("details = %v", ae.Details)
		}
		if s.dump() != before {
			t.Fatal("MAX_EXTENSIONS_EXCEEDED wrote something")
		}
		if got := s.st(""); got.String() != bal0.String() {
			t.Fatalf("extend changed the ledger: %s -> %s", bal0, got)
		}
		// Once committed, a replay of an extend reports no remaining time.
		if _, err := s.commit(rid, "", "100", "c"); err != nil {
			t.Fatal(err)
		}
		if late, err := s.extend(rid, "1500", "x1"); err != nil || late.RemTTL != "0" {
			t.Fatalf("extend replay after commit: %+v %v", late, err)
		}
	})
}
