package sweeper

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// Script-level conformance of lua/sweeper/expire_batch.lua (docs/protocol.md#expiry,
// cases C1-C8), called through the executor with no Go
// sweeper logic in between, on real Redis and on the embedded store.

// C1: ACTIVE -> EXPIRED, exact refund at every budgeted scope, index entry
// removed, 30-day audit TTL, one reservation.expired event.
func TestC1ExpireRefundsEveryBudgetedScope(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(3)
		budgets := f.budgets(sc, "TOKENS", "1000", "100")
		// A scope the subject derives but that held no budget at reserve
		// time is not in "budgeted" and must stay untouched.
		other := f.budget(sc[0]+"/agent:other", "TOKENS", "50", "0")
		id := f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: now - 61_000, ExpiresAt: now - 6_000, GraceMs: 5_000, ExtCount: 2})

		r := f.expire(1000)
		if r.Expired != 1 || r.Processed() != 1 || r.Due != 0 || r.DueBefore != 1 {
			t.Fatalf("result %+v, want exactly one expiry and nothing left due", r)
		}
		for _, b := range budgets {
			f.wantLedger(b, "0", "1000")
			f.checkInvariant(b)
		}
		f.wantLedger(other, "0", "50")
		rec := f.hgetall(f.k.Reservation(id))
		if rec["state"] != "EXPIRED" || rec["expired_at"] != strconv.FormatInt(r.Now, 10) {
			t.Fatalf("record state=%s expired_at=%s, want EXPIRED at %d", rec["state"], rec["expired_at"], r.Now)
		}
		// The audit trail keeps what the reservation held.
		if rec["estimate"] != "100" || rec["unit"] != "TOKENS" || rec["budgeted"] == "" || rec["scope_path"] != sc[2] {
			t.Fatalf("audit fields lost: %v", rec)
		}
		if f.inIndex(id) {
			t.Fatal("expired id still in the deadline index")
		}
		ttl := f.c.PTTL(f.ctx, f.k.Reservation(id)).Val()
		if ttl <= time.Duration(keys.TerminalRetentionMs-60_000)*time.Millisecond || ttl > time.Duration(keys.TerminalRetentionMs)*time.Millisecond {
			t.Fatalf("record TTL %v, want ~30 days", ttl)
		}

		msgs := f.wantEvents(1)
		v := msgs[0].Values
		if v["type"] != "reservation.expired" || v["cat"] != "reservation" || v["scope"] != sc[2] || v["actor"] != "system" || v["ts"] != strconv.FormatInt(r.Now, 10) {
			t.Fatalf("event envelope %v", v)
		}
		if id, _ := v["id"].(string); len(id) != len("evt_"+f.tenant+"_")+16 || !strings.HasPrefix(id, "evt_"+f.tenant+"_") {
			t.Fatalf("event id %q, want evt_<tenant>_ + 16 hex", id)
		}
		if tr, _ := v["trace"].(string); tr != "" && len(tr) != 32 {
			t.Fatalf("trace id %q", tr)
		}
		var data map[string]any
		if err := json.Unmarshal([]byte(v["data"].(string)), &data); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{
			"reservation_id": id, "scope": sc[2], "unit": "TOKENS", "estimated_amount": "100",
			"expires_at_ms": float64(now - 6_000), "ttl_ms": float64(55_000), "extensions_used": float64(2),
			"created_at": time.UnixMilli(now - 61_000).UTC().Format("2006-01-02T15:04:05.000Z"),
			"expired_at": time.UnixMilli(r.Now).UTC().Format("2006-01-02T15:04:05.000Z"),
		}
		for k, w := range want {
			if data[k] != w {
				t.Errorf("data[%s] = %#v, want %#v", k, data[k], w)
			}
		}
	})
}

// C2: the refund is exact at the int64 edges on every scope; a refund that
// would overflow any scope is refused as a whole (quarantine, nothing written).
func TestC2ExactInt64Refunds(t *testing.T) {
	cases := []struct {
		name, allocated, reserved, estimate string
		wantReserved, wantRemaining         string
	}{
		{"2^53+1", "18014398509481986", "18014398509481986", i53p1, i53p1, i53p1},
		{"2^63-1", i64max, i64max, i64max, "0", i64max},
		{"2^63-1 partly reserved", i64max, "9223372036854775806", "9223372036854775805", "1", "9223372036854775806"},
	}
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					f := newFixtureFor(t, be)
					now := f.redisNow()
					sc := f.scopes(3)
					bs := f.budgets(sc, "USD_MICROCENTS", tc.allocated, tc.reserved)
					f.reservation(resv{Unit: "USD_MICROCENTS", Estimate: tc.estimate, Budgeted: sc, CreatedAt: now - 10_000, ExpiresAt: now - 2_000})
					if r := f.expire(10); r.Expired != 1 {
						t.Fatalf("result %+v", r)
					}
					for _, b := range bs {
						f.wantLedger(b, tc.wantReserved, tc.wantRemaining)
						f.checkInvariant(b)
					}
					var data map[string]any
					_ = json.Unmarshal([]byte(f.streamEvents()[0].Values["data"].(string)), &data)
					if data["estimated_amount"] != tc.estimate {
						t.Fatalf("event estimated_amount %v, want the exact string %s", data["estimated_amount"], tc.estimate)
					}
				})
			}
			t.Run("overflow refused with nothing written", func(t *testing.T) {
				f := newFixtureFor(t, be)
				now := f.redisNow()
				sc := f.scopes(3)
				b0 := f.budget(sc[0], "TOKENS", "1000", "10")
				b1 := f.budget(sc[1], "TOKENS", "1000", "10")
				// remaining + 10 > 2^63-1 on the last scope only.
				b2 := f.budgetRaw(sc[2], "TOKENS", map[string]string{"allocated": i64max, "reserved": "10", "remaining": "9223372036854775800"})
				id := f.reservation(resv{Estimate: "10", Budgeted: sc, CreatedAt: now - 10_000, ExpiresAt: now - 2_000})
				r := f.expire(10)
				if r.Quarantined != 1 || r.Expired != 0 || len(r.Q) != 1 || r.Q[0].Reason != "AMOUNT_OVERFLOW" {
					t.Fatalf("result %+v, want one AMOUNT_OVERFLOW quarantine", r)
				}
				for b, want := range map[string][2]string{b0: {"10", "990"}, b1: {"10", "990"}, b2: {"10", "9223372036854775800"}} {
					f.wantLedger(b, want[0], want[1])
				}
				if st := f.hget(f.k.Reservation(id), "state"); st != "ACTIVE" {
					t.Fatalf("state %s, want ACTIVE (quarantine leaves the state)", st)
				}
				f.wantEvents(0)
			})
		})
	}
}

// C3: COMMITTED/RELEASED/EXPIRED entries are dropped from the index with no
// ledger change and no event.
func TestC3FinalizedAreSkipped(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(2)
		bs := f.budgets(sc, "TOKENS", "1000", "300")
		var ids []string
		for _, st := range []string{"COMMITTED", "RELEASED", "EXPIRED"} {
			ids = append(ids, f.reservation(resv{State: st, Estimate: "100", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000}))
		}
		before := f.hgetall(f.k.Reservation(ids[0]))
		r := f.expire(100)
		if r.Skipped != 3 || r.Processed() != 3 {
			t.Fatalf("result %+v, want 3 skipped", r)
		}
		for _, b := range bs {
			f.wantLedger(b, "300", "700")
		}
		for _, id := range ids {
			if f.inIndex(id) {
				t.Fatalf("%s left in the index", id)
			}
		}
		if after := f.hgetall(f.k.Reservation(ids[0])); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("finalized record changed: %v -> %v", before, after)
		}
		f.wantEvents(0)
	})
}

// C4: a second run over an already expired reservation (a second sweeper that
// read a stale index, or a retry) refunds nothing and emits nothing.
func TestC4ReRunIsIdempotent(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(2)
		b0 := f.budget(sc[0], "TOKENS", "1000", "100")
		f.budget(sc[1], "TOKENS", "1000", "100")
		id := f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000})
		if r := f.expire(10); r.Expired != 1 {
			t.Fatalf("first run %+v", r)
		}
		if r := f.expire(10); r.Processed() != 0 || r.DueBefore != 0 {
			t.Fatalf("second run with nothing due %+v", r)
		}
		// Put the id back in the index, as a racing writer could have.
		f.c.ZAdd(f.ctx, f.k.Deadlines(), redis.Z{Score: float64(now - 5000), Member: id})
		if r := f.expire(10); r.Skipped != 1 || r.Expired != 0 {
			t.Fatalf("re-run on EXPIRED %+v, want skipped", r)
		}
		f.wantLedger(b0, "0", "1000")
		f.wantEvents(1)
	})
}

// C5: grace is honoured to the millisecond. The clock of the embedded store is
// frozen so the boundary is exact; the deadline entries are scored by
// expires_at alone so that the script's own record check decides.
func TestC5GraceBoundary(t *testing.T) {
	T := time.UnixMilli(1_767_225_600_123) // 2026-01-01T00:00:00.123Z
	c, m := redistest.Clocked(t, T)
	now := T.UnixMilli()

	f := newFixture(t, c)
	sc := f.scopes(1)
	b := f.budget(sc[0], "TOKENS", "1000", "300")
	seed := func(deadlineOffset int64) string {
		exp := now - 10_000
		return f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: exp - 60_000, ExpiresAt: exp, GraceMs: 10_000 + deadlineOffset, Score: ptr(exp)})
	}
	inside := seed(+1) // now = expires_at + grace - 1: 1 ms inside grace
	edge := seed(0)    // now = expires_at + grace: still inside (now <= deadline)
	past := seed(-1)   // now = expires_at + grace + 1: 1 ms past

	r := f.expire(100)
	if r.Now != now || r.Expired != 1 || r.InGrace != 2 {
		t.Fatalf("result %+v, want 1 expired and 2 in grace at %d", r, now)
	}
	if st := f.hget(f.k.Reservation(past), "state"); st != "EXPIRED" {
		t.Fatalf("1 ms past grace: state %s", st)
	}
	for id, deadline := range map[string]int64{inside: now + 1, edge: now} {
		rec := f.hgetall(f.k.Reservation(id))
		if rec["state"] != "ACTIVE" || rec["expired_at"] != "" || rec["quarantined_at"] != "" {
			t.Fatalf("in-grace record touched: %v", rec)
		}
		// Re-scored to its real deadline so it stops heading every batch.
		if s := f.score(id); s != deadline {
			t.Fatalf("in-grace entry scored %d, want %d", s, deadline)
		}
	}
	if res, _ := f.ledger(b); res != "200" {
		t.Fatalf("reserved %s, want 200 (only the expired one refunded)", res)
	}

	m.SetTime(T.Add(time.Millisecond)) // edge is now 1 ms past; inside is at its edge
	if r := f.expire(100); r.Expired != 1 || f.hget(f.k.Reservation(edge), "state") != "EXPIRED" {
		t.Fatalf("at +1 ms: %+v", r)
	}
	if st := f.hget(f.k.Reservation(inside), "state"); st != "ACTIVE" {
		t.Fatalf("entry expired before its deadline: %s", st)
	}
	m.SetTime(T.Add(2 * time.Millisecond))
	if r := f.expire(100); r.Expired != 1 || f.hget(f.k.Reservation(inside), "state") != "EXPIRED" {
		t.Fatalf("at +2 ms: %+v", r)
	}
	f.wantLedger(b, "0", "1000")
}

// C5 on a real Redis, whose clock cannot be frozen: deadlines straddle the
// Redis TIME read just before the call, and each record's fate must match
// "expired iff now > expires_at + grace" against the now the script used.
func TestC5GraceBoundaryRealClock(t *testing.T) {
	f := newFixture(t, redistest.SharedClient(t))
	sc := f.scopes(1)
	f.budget(sc[0], "TOKENS", "100000", "1000")
	t0 := f.redisNow()
	deadlines := map[string]int64{}
	for off := int64(-3); off <= 6; off++ {
		exp := t0 - 5000
		id := f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: exp - 1000, ExpiresAt: exp, GraceMs: 5000 + off, Score: ptr(exp)})
		deadlines[id] = t0 + off
	}
	r := f.expire(100)
	if r.Expired+r.InGrace != 10 {
		t.Fatalf("result %+v", r)
	}
	for id, d := range deadlines {
		st := f.hget(f.k.Reservation(id), "state")
		if want := map[bool]string{true: "EXPIRED", false: "ACTIVE"}[r.Now > d]; st != want {
			t.Fatalf("deadline %d, script now %d: state %s, want %s", d, r.Now, st, want)
		}
	}
}

// C6: an index entry whose record is gone is removed (NOT_FOUND) and nothing
// else is written.
func TestC6NotFoundCleansIndex(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		f.c.ZAdd(f.ctx, f.k.Deadlines(), redis.Z{Score: float64(now - 1000), Member: "ghost"})
		r := f.expire(10)
		if r.NotFound != 1 || r.Processed() != 1 {
			t.Fatalf("result %+v", r)
		}
		if f.inIndex("ghost") {
			t.Fatal("orphan entry kept")
		}
		if n := f.c.Exists(f.ctx, f.k.Reservation("ghost"), f.k.Events()).Val(); n != 0 {
			t.Fatalf("NOT_FOUND wrote %d keys", n)
		}
	})
}

// C7: corrupt records are quarantined (kept, flagged, removed from the index,
// counted) without touching the ledger, and never stop the rest of the batch.
func TestC7CorruptRecordsAreQuarantined(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(2)
		b0 := f.budget(sc[0], "TOKENS", "100000", "10000")
		b1 := f.budget(sc[1], "TOKENS", "100000", "10000")
		f.budgetRaw(sc[1]+"/agent:bad", "TOKENS", map[string]string{"allocated": "10", "reserved": "x1", "remaining": "0"})
		f.budget(sc[1]+"/agent:low", "TOKENS", "10", "5")
		base := resv{Estimate: "100", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000}
		with := func(fields map[string]string) resv { r := base; r.Fields = fields; return r }
		scopes := func(s ...string) resv { r := base; r.Budgeted = s; return r }
		cases := map[string]struct {
			r      resv
			reason string
		}{
			"bad expiry":        {with(map[string]string{"expires_at": "soon"}), "INVALID_EXPIRY"},
			"missing grace":     {with(map[string]string{"grace_ms": ""}), "INVALID_EXPIRY"},
			"negative estimate": {with(map[string]string{"estimate": "-5"}), "INVALID_ESTIMATE"},
			"fractional":        {with(map[string]string{"estimate": "1.5"}), "INVALID_ESTIMATE"},
			"too large":         {with(map[string]string{"estimate": "9223372036854775808"}), "INVALID_ESTIMATE"},
			"missing estimate":  {with(map[string]string{"estimate": ""}), "INVALID_ESTIMATE"},
			"missing unit":      {with(map[string]string{"unit": ""}), "INVALID_ESTIMATE"},
			"missing scopes":    {with(map[string]string{"budgeted": ""}), "MISSING_SCOPES"},
			"empty scopes":      {with(map[string]string{"budgeted": "[]"}), "MISSING_SCOPES"},
			"scopes not json":   {with(map[string]string{"budgeted": "tenant:x"}), "MALFORMED_SCOPES"},
			"scopes object":     {with(map[string]string{"budgeted": `{"a":1}`}), "MALFORMED_SCOPES"},
			"scope not string":  {with(map[string]string{"budgeted": `[1]`}), "MALFORMED_SCOPES"},
			"duplicate scope":   {scopes(sc[0], sc[0]), "MALFORMED_SCOPES"},
			"unknown state":     {with(map[string]string{"state": "PENDING"}), "INVALID_STATE"},
			"missing budget":    {scopes(sc[0], sc[1]+"/agent:gone"), "MISSING_BUDGET"},
			"corrupt budget":    {scopes(sc[0], sc[1]+"/agent:bad"), "CORRUPT_BUDGET"},
			"reserved too low":  {scopes(sc[0], sc[1]+"/agent:low"), "RESERVED_UNDERFLOW"},
		}
		want := map[string]string{}
		for name, tc := range cases {
			r := tc.r
			r.ID = "q-" + randHex(4)
			f.reservation(r)
			want[r.ID] = tc.reason
			_ = name
		}
		// A key of the wrong type cannot be flagged, only unindexed.
		f.c.Set(f.ctx, f.k.Reservation("wrongtype"), "x", 0)
		f.c.ZAdd(f.ctx, f.k.Deadlines(), redis.Z{Score: float64(now - 5000), Member: "wrongtype"})
		want["wrongtype"] = "WRONG_TYPE"
		healthy := f.reservation(base)

		r := f.expire(1000)
		if r.Expired != 1 || r.Quarantined != int64(len(want)) || r.Due != 0 {
			t.Fatalf("result %+v, want 1 expired and %d quarantined", r, len(want))
		}
		got := map[string]string{}
		for _, q := range r.Q {
			got[q.ID] = q.Reason
		}
		for id, reason := range want {
			if got[id] != reason {
				t.Errorf("%s: reason %q, want %q", id, got[id], reason)
			}
			if f.inIndex(id) {
				t.Errorf("%s: still indexed", id)
			}
			if id == "wrongtype" {
				continue
			}
			rec := f.hgetall(f.k.Reservation(id))
			if rec["quarantine_reason"] != reason || rec["quarantined_at"] != strconv.FormatInt(r.Now, 10) {
				t.Errorf("%s: not flagged: %v", id, rec)
			}
			if rec["expired_at"] != "" || (rec["state"] != "ACTIVE" && rec["state"] != "PENDING") {
				t.Errorf("%s: state changed: %v", id, rec)
			}
			if ttl := f.c.PTTL(f.ctx, f.k.Reservation(id)).Val(); ttl != -1 {
				t.Errorf("%s: quarantined record must be kept, TTL %v", id, ttl)
			}
		}
		if st := f.hget(f.k.Reservation(healthy), "state"); st != "EXPIRED" {
			t.Fatalf("healthy reservation in the same batch: %s", st)
		}
		// Only the healthy reservation was refunded.
		for _, b := range []string{b0, b1} {
			f.wantLedger(b, "9900", "90100")
		}
		f.wantEvents(1)
	})
}

// C8: only Redis TIME decides. A client time passed as extra ARGV (far future
// or zero) is ignored: an in-grace reservation is not expired by a future
// client clock, a due one is expired despite a zero client clock, and
// expired_at is the Redis time.
func TestC8RedisTimeOnly(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			for _, bogus := range []string{"99999999999999", "0"} {
				f := newFixtureFor(t, be)
				t0 := f.redisNow()
				sc := f.scopes(1)
				f.budget(sc[0], "TOKENS", "1000", "200")
				due := f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: t0 - 9000, ExpiresAt: t0 - 5000})
				// Scored as due, but its record says the deadline is a minute away.
				later := f.reservation(resv{Estimate: "100", Budgeted: sc, CreatedAt: t0 - 9000, ExpiresAt: t0 + 55_000, GraceMs: 5000, Score: ptr(t0 - 1)})
				r := f.expire(10, bogus, bogus)
				t1 := f.redisNow()
				if r.Now < t0 || r.Now > t1 {
					t.Fatalf("bogus %s: script now %d outside Redis TIME [%d, %d]", bogus, r.Now, t0, t1)
				}
				if r.Expired != 1 || r.InGrace != 1 {
					t.Fatalf("bogus %s: %+v", bogus, r)
				}
				if at := f.hget(f.k.Reservation(due), "expired_at"); at != strconv.FormatInt(r.Now, 10) {
					t.Fatalf("expired_at %s, want Redis time %d", at, r.Now)
				}
				if st := f.hget(f.k.Reservation(later), "state"); st != "ACTIVE" {
					t.Fatalf("bogus %s expired a reservation inside its grace", bogus)
				}
			}
		})
	}
}

// The batch bound: at most N per call, and due tells the caller to go on.
func TestExpireBatchIsBounded(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(1)
		b := f.budget(sc[0], "TOKENS", "1000", "25")
		f.seedDue(now, sc, 25)
		for _, want := range []struct{ expired, dueBefore, due int64 }{{10, 25, 15}, {10, 15, 5}, {5, 5, 0}} {
			r := f.expire(10)
			if r.Expired != want.expired || r.DueBefore != want.dueBefore || r.Due != want.due {
				t.Fatalf("got %+v, want %+v", r, want)
			}
		}
		f.wantLedger(b, "0", "1000")
	})
}

func TestExpireRefusesBadArguments(t *testing.T) {
	f := newFixture(t, redistest.SharedClient(t))
	ectx := eventctx.Arg(context.Background(), eventctx.DefaultRetention)
	good := f.k.SweepTally("d1")
	for _, tc := range []struct {
		name  string
		tally string
		args  []any
	}{
		{"batch 0", good, []any{0, ectx, "", "", "", 1000}},
		{"batch -1", good, []any{-1, ectx, "", "", "", 1000}},
		{"batch 10001", good, []any{10001, ectx, "", "", "", 1000}},
		{"event context not json", good, []any{10, "not json", "", "", "", 1000}},
		{"no time budget", good, []any{10, ectx}},
		{"time budget 0", good, []any{10, ectx, "", "", "", 0}},
		{"time budget over 1 s", good, []any{10, ectx, "", "", "", 1_000_001}},
		{"time budget not a number", good, []any{10, ectx, "", "", "", "5ms"}},
		{"tally of another tenant", keys.Tenant("other").SweepTally("d1"), []any{10, ectx, "", "", "", 1000}},
		{"tally without a drain id", f.k.SweepTally(""), []any{10, ectx, "", "", "", 1000}},
		{"tally outside the sweep namespace", f.k.Events(), []any{10, ectx, "", "", "", 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.runExpire(tc.tally, tc.args...)
			// On a Cluster, another tenant's key is in another slot: Redis
			// refuses the call before the script runs, which is the same
			// refusal with nothing written.
			crossSlot := redistest.OnCluster() && err != nil && strings.Contains(err.Error(), "CROSSSLOT")
			if !apierr.HasCode(err, apierr.InvalidRequest) && !crossSlot {
				t.Fatalf("err %v, want INVALID_REQUEST", err)
			}
		})
	}
}

// The time bound: once a call has used its budget of Redis time it takes no
// further candidate (the first always), says how many are still due, and
// the next call goes on; each reservation is expired once. With a 1 µs
// budget every call handles exactly one candidate: handling one takes far
// longer than a microsecond on any backend.
func TestExpireBatchStopsAtItsTimeBudget(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(2)
		budgets := f.budgets(sc, "TOKENS", "1000", "20")
		f.seedDue(now, sc, 20)
		tallyKey := f.k.SweepTally(newDrainID())
		for call := 1; call <= 20; call++ {
			r, err := f.runExpire(tallyKey, 1000, eventctx.Arg(context.Background(), eventctx.DefaultRetention), "", "", "", 1)
			if err != nil {
				t.Fatal(err)
			}
			want := int64(20 - call)
			if r.Expired != 1 || r.Processed() != 1 || r.Due != want || r.DueBefore != want+1 {
				t.Fatalf("call %d: %+v, want one expiry and %d left due", call, r, want)
			}
			if r.Total.Expired != int64(call) || r.Total.DueBefore != 20 {
				t.Fatalf("call %d: tally %+v, want %d expired of 20 due", call, r.Total, call)
			}
		}
		for _, b := range budgets {
			f.wantLedger(b, "0", "1000")
		}
		f.wantEvents(20)
	})
}

// The drain's tally: every call of one drain adds its outcomes, and each
// reply returns the totals so far, so the counts of a call whose reply was
// lost arrive with the next one. Another drain's tally is separate; a call
// that handles nothing writes no tally; the tally expires.
func TestExpireBatchTallyCarriesLostCounts(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(1)
		f.budget(sc[0], "TOKENS", "1000", "14")
		f.seedDue(now, sc, 12)
		f.reservation(resv{Estimate: "1", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 6000, State: "COMMITTED"})
		f.reservation(resv{Estimate: "1", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 6000, State: "RELEASED"})
		run := func(tallyKey string) batchResult {
			t.Helper()
			r, err := f.runExpire(tallyKey, 5, eventctx.Arg(context.Background(), eventctx.DefaultRetention), "", "", "", 1_000_000)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		drain := f.k.SweepTally(newDrainID())
		first := run(drain) // its reply "lost": only the next reply is read
		if first.Processed() != 5 || first.Total.Processed() != 5 {
			t.Fatalf("first call %+v", first)
		}
		second := run(drain)
		want := tally{Counts: Counts{Expired: first.Expired + second.Expired, Skipped: first.Skipped + second.Skipped}, DueBefore: 14}
		if second.Total != want || second.Total.Processed() != 10 {
			t.Fatalf("tally after two calls %+v, want %+v", second.Total, want)
		}
		other := f.k.SweepTally(newDrainID())
		third := run(other)
		if third.Total != (tally{Counts: third.Counts, DueBefore: 4}) || third.Processed() != 4 || third.Due != 0 {
			t.Fatalf("another drain's call %+v", third)
		}
		idle := f.k.SweepTally(newDrainID())
		if r := run(idle); r.Processed() != 0 || r.Total != (tally{}) {
			t.Fatalf("idle call %+v", r)
		}
		if n := f.c.Exists(f.ctx, idle).Val(); n != 0 {
			t.Fatal("a call that handled nothing wrote a tally")
		}
		if ttl := f.c.PTTL(f.ctx, drain).Val(); ttl <= 0 || ttl > 10*time.Minute {
			t.Fatalf("tally TTL %v, want at most 10 min", ttl)
		}
	})
}

// One call reads its candidates in pages (lua TB.PAGE = 128) up to the batch
// size: past a page boundary it goes on with the next due entries, and an
// entry it re-scored (in grace) or removed is not met again in the same call.
func TestExpireBatchPagesThroughItsCandidates(t *testing.T) {
	eachBackend(t, func(t *testing.T, f *fixture) {
		now := f.redisNow()
		sc := f.scopes(1)
		b := f.budget(sc[0], "TOKENS", "1000", "200")
		for i := 0; i < 300; i++ {
			if i%3 == 2 {
				// Scored as due, but its record's deadline is a minute away.
				f.reservation(resv{Estimate: "1", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now + 60_000, Score: ptr(now - 4000 + int64(i))})
				continue
			}
			f.reservation(resv{Estimate: "1", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000 + int64(i)})
		}
		r := f.expire(1000)
		if r.Expired != 200 || r.InGrace != 100 || r.Processed() != 300 || r.DueBefore != 300 || r.Due != 0 {
			t.Fatalf("one call over 300 due: %+v", r)
		}
		f.wantLedger(b, "0", "1000")
		f.wantEvents(200)
		// A batch smaller than a page, then one ending mid-page.
		f2 := newFixtureFor(t, f.be)
		now = f2.redisNow()
		sc = f2.scopes(1)
		f2.budget(sc[0], "TOKENS", "1000", "200")
		f2.seedDue(now, sc, 200)
		for _, want := range []struct {
			n            int
			expired, due int64
		}{{5, 5, 195}, {150, 150, 45}, {1000, 45, 0}} {
			if r := f2.expire(want.n); r.Expired != want.expired || r.Due != want.due {
				t.Fatalf("batch %d: %+v, want %d expired and %d due", want.n, r, want.expired, want.due)
			}
		}
	})
}
