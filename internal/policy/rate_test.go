package policy_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// rates is a rate_limits term (0 = unset).
func rates(res, com int32) *cyclesv1.PolicyRateLimits {
	r := &cyclesv1.PolicyRateLimits{}
	if res > 0 {
		r.MaxReservationsPerMinute = proto.Int32(res)
	}
	if com > 0 {
		r.MaxCommitsPerMinute = proto.Int32(com)
	}
	return r
}

// rateStep is one call of a rate-limit scenario and the outcome it must get.
type rateStep struct {
	subj *cyclesv1.Subject
	mode string // live, dry, observe, decide, replay (the previous live call's key again), broke (an estimate no budget holds)
	want string // ALLOW, DENY, or a refusal code
}

// decideCall is a decide of subj; the decision or the refusal code, and the deny reason.
func (e *env) decideCall(subj *cyclesv1.Subject) (string, string) {
	e.t.Helper()
	n++
	req := &cyclesv1.DecideRequest{IdempotencyKey: fmt.Sprintf("d-%d", n), Subject: subj,
		Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}}
	d, err := call(e.ctx, func(ctx context.Context, r *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
		return e.led.Decide(ctx, e.tenant, r)
	}, req)
	if err != nil {
		ae, _ := apierr.As(err)
		if ae == nil {
			e.t.Fatalf("decide: %v", err)
		}
		return string(ae.Code), ""
	}
	return d.GetDecision().String()[len("DECISION_"):], d.GetDenyDetail().GetReasonCode()
}

// redisNow is Redis TIME in ms (the scripts' only clock).
func (e *env) redisNow() int64 {
	e.t.Helper()
	return ledgertest.RedisNowMs(e.t, e.rdb)
}

// freshWindow starts a scenario clear of the end of its per-minute rate
// window (ledgertest.ClearOfBoundary: 8 s at least).
func (e *env) freshWindow() {
	e.t.Helper()
	ledgertest.ClearOfBoundary(e.t, e.rdb, time.Minute, 8*time.Second)
}

// rateCount is the counter hash of the Redis TIME minute holding resetAtMs's
// window end, and the field of what ('r' | 'c') at scope.
func (e *env) rateCount(resetAtMs int64, what, scope string) (key string, count int64) {
	key = keys.Tenant(e.tenant).PolicyRate(strconv.FormatInt(resetAtMs/60_000-1, 10))
	v, err := e.rdb.HGet(e.ctx, key, what+"|"+scope).Int64()
	if err != nil {
		e.t.Fatalf("counter %s %s|%s: %v", key, what, scope, err)
	}
	return key, v
}

// TestPolicyRateLimits: which policy's max_reservations_per_minute governs a
// reserve (precedence per field, status, effective window), that every
// concrete scope path counts on its own, and what counts: only a live reserve
// that creates its reservation (not a dry run, an observed request, a
// decide, a replay or a refused reserve), while dry runs, observed requests
// and decides answer DENY (reason LIMIT_EXCEEDED) at the limit.
func TestPolicyRateLimits(t *testing.T) {
	const day = int64(86_400_000)
	type pol struct {
		pattern  string
		prio     int32
		rl       *cyclesv1.PolicyRateLimits
		disabled bool
		future   bool
	}
	for _, c := range []struct {
		name  string
		pols  []pol
		steps []rateStep
	}{
		{"limit per concrete scope path", []pol{{"*", 0, rates(2, 0), false, false}}, []rateStep{
			{bot, "live", "ALLOW"}, {bot, "live", "ALLOW"}, {bot, "live", "LIMIT_EXCEEDED"},
			{prod, "live", "ALLOW"}, {prod, "live", "ALLOW"}, {prod, "live", "LIMIT_EXCEEDED"},
		}},
		{"pattern reaches only its scopes", []pol{{"tenant:T/workspace:prod/agent:*", 0, rates(1, 0), false, false}}, []rateStep{
			{bot, "live", "ALLOW"}, {bot, "live", "LIMIT_EXCEEDED"}, {prod, "live", "ALLOW"}, {prod, "live", "ALLOW"},
		}},
		{"higher priority wins", []pol{{"*", 0, rates(1, 0), false, false}, {"tenant:T/workspace:prod/*", 5, rates(3, 0), false, false}}, []rateStep{
			{bot, "live", "ALLOW"}, {bot, "live", "ALLOW"}, {bot, "live", "ALLOW"}, {bot, "live", "LIMIT_EXCEEDED"},
		}},
		{"per field: a higher policy without the field leaves it to a lower one",
			[]pol{{"*", 0, rates(1, 0), false, false}, {"tenant:T/workspace:prod/*", 5, rates(0, 9), false, false}}, []rateStep{
				{bot, "live", "ALLOW"}, {bot, "live", "LIMIT_EXCEEDED"},
			}},
		{"disabled and future policies do not limit",
			[]pol{{"*", 9, rates(1, 0), true, false}, {"tenant:T/*", 8, rates(1, 0), false, true}}, []rateStep{
				{bot, "live", "ALLOW"}, {bot, "live", "ALLOW"}, {bot, "live", "ALLOW"},
			}},
		{"dry run, observe and decide read, never count", []pol{{"*", 0, rates(1, 0), false, false}}, []rateStep{
			{bot, "dry", "ALLOW"}, {bot, "observe", "ALLOW"}, {bot, "decide", "ALLOW"}, {bot, "dry", "ALLOW"},
			{bot, "live", "ALLOW"},
			{bot, "dry", "DENY"}, {bot, "observe", "DENY"}, {bot, "decide", "DENY"}, {bot, "live", "LIMIT_EXCEEDED"},
		}},
		{"a replay is answered, neither counted nor refused", []pol{{"*", 0, rates(1, 0), false, false}}, []rateStep{
			{bot, "live", "ALLOW"}, {bot, "replay", "ALLOW"}, {bot, "live", "LIMIT_EXCEEDED"}, {bot, "replay", "ALLOW"},
		}},
		{"a reserve refused for its budget counts nothing", []pol{{"*", 0, rates(1, 0), false, false}}, []rateStep{
			{bot, "broke", "BUDGET_EXCEEDED"}, {bot, "broke", "BUDGET_EXCEEDED"}, {bot, "live", "ALLOW"}, {bot, "broke", "LIMIT_EXCEEDED"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			now := e.redisNow()
			for i, p := range c.pols {
				req := &cyclesv1.CreateScopePolicyRequest{Name: fmt.Sprintf("p%d", i), ScopePattern: replaceT(p.pattern, e.tenant),
					Priority: p.prio, RateLimits: p.rl}
				if p.disabled {
					req.Status = cyclesv1.PolicyStatus_POLICY_STATUS_DISABLED
				}
				if p.future {
					req.EffectiveFromMs = now + day
				}
				e.create(req)
			}
			e.freshWindow()
			var lastKey string
			for i, s := range c.steps {
				var got, reason string
				switch s.mode {
				case "decide":
					got, reason = e.decideCall(s.subj)
				case "replay":
					var dd *cyclesv1.DenyDetail
					got, dd, _ = e.try(s.subj, "llm.completion", "live", func(r *cyclesv1.CreateReservationRequest) { r.IdempotencyKey = lastKey })
					reason = dd.GetReasonCode()
				default:
					mode, tryMode := s.mode, s.mode
					if mode == "broke" {
						tryMode = "live"
					}
					var dd *cyclesv1.DenyDetail
					var key string
					got, dd, _ = e.try(s.subj, "llm.completion", tryMode, func(r *cyclesv1.CreateReservationRequest) {
						if mode == "broke" {
							r.Estimate.Amount = 5_000_000
						}
						key = r.IdempotencyKey
					})
					if mode == "live" && got == "ALLOW" {
						lastKey = key
					}
					reason = dd.GetReasonCode()
				}
				if got != s.want {
					t.Fatalf("step %d (%s %s): %s, want %s", i, s.mode, s.subj, got, s.want)
				}
				if got == "DENY" && reason != "LIMIT_EXCEEDED" {
					t.Fatalf("step %d (%s): DENY reason %q, want LIMIT_EXCEEDED", i, s.mode, reason)
				}
			}
		})
	}
}

// TestPolicyRateLimitRefusal: a live reserve at the limit is LIMIT_EXCEEDED
// (RESOURCE_EXHAUSTED, RetryInfo, details naming the scope, policy, limit and
// the window's end), moves nothing, and the counter hash is the Redis TIME
// minute's, expiring at that minute's end: rollover is its expiry (deleting
// the hash, as the expiry does, admits again), and a full counter of the
// previous minute governs nothing.
func TestPolicyRateLimitRefusal(t *testing.T) {
	e := newEnv(t)
	p := e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", RateLimits: rates(2, 0)})
	botPath := "tenant:" + e.tenant + "/workspace:prod/agent:bot"
	e.freshWindow()
	e.reserve(bot)
	e.reserve(bot)
	budget := keys.Tenant(e.tenant).Budget(botPath, "TOKENS")
	before, _ := e.rdb.HGetAll(e.ctx, budget).Result()
	n++
	_, err := e.led.Reserve(e.ctx, e.tenant, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("k-%d", n), Subject: bot,
		Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 10}})
	ae, ok := apierr.As(err)
	if !ok || ae.Code != apierr.LimitExceeded {
		t.Fatalf("third reserve: %v, want LIMIT_EXCEEDED", err)
	}
	now := e.redisNow()
	reset, _ := strconv.ParseInt(ae.Details["reset_at_ms"], 10, 64)
	retry, _ := strconv.ParseInt(ae.Details["retry_after_ms"], 10, 64)
	if ae.Details["scope"] != botPath || ae.Details["policy_id"] != p.GetPolicyId() || ae.Details["limit"] != "2" ||
		ae.Details["rate_limit"] != "max_reservations_per_minute" || reset%60_000 != 0 || reset <= now-1000 || reset > now+60_000 ||
		retry <= 0 || retry > 60_000 {
		t.Fatalf("details %v (Redis TIME %d)", ae.Details, now)
	}
	st := ae.Status("", "")
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("gRPC code %v", st.Code())
	}
	var ri *errdetails.RetryInfo
	for _, d := range st.Details() {
		if r, isRetry := d.(*errdetails.RetryInfo); isRetry {
			ri = r
		}
	}
	if ri == nil || ri.GetRetryDelay().AsDuration().Milliseconds() != retry {
		t.Fatalf("RetryInfo %v, want %d ms", ri, retry)
	}
	if c, _, _ := apierr.FromStatus(status.ErrorProto(st.Proto())); c != apierr.LimitExceeded {
		t.Fatalf("ErrorInfo reason %s", c)
	}
	after, _ := e.rdb.HGetAll(e.ctx, budget).Result()
	if fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("the refused reserve moved the budget: %v -> %v", before, after)
	}
	key, cnt := e.rateCount(reset, "r", botPath)
	if cnt != 2 {
		t.Fatalf("counter %d, want 2", cnt)
	}
	if exp, _ := e.rdb.PExpireTime(e.ctx, key).Result(); exp.Milliseconds() != reset {
		t.Fatalf("counter expires at %v, want the window's end %d", exp, reset)
	}
	// Rollover: a full counter of the previous minute governs nothing...
	prev := keys.Tenant(e.tenant).PolicyRate(strconv.FormatInt(reset/60_000-2, 10))
	if err := e.rdb.HSet(e.ctx, prev, "r|"+botPath, "99").Err(); err != nil {
		t.Fatal(err)
	}
	defer e.rdb.Del(e.ctx, prev)
	// ...and the window's end (the hash expiring) admits again, counting from 1.
	if err := e.rdb.Del(e.ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.reserve(bot)
	_, cnt = e.rateCount(reset, "r", botPath)
	if r.GetReservationId() == "" || cnt != 1 {
		t.Fatalf("after the window: %v, counter %d", r, cnt)
	}
}

// TestPolicyCommitRateLimit: max_commits_per_minute counts commits at the
// reservation's scope path; a refused commit moves nothing (the reservation
// stays ACTIVE and can be released), replays and releases are not limited.
func TestPolicyCommitRateLimit(t *testing.T) {
	e := newEnv(t)
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "tenant:" + e.tenant + "/workspace:prod/*", RateLimits: rates(0, 2)})
	e.freshWindow()
	var ids []string
	for range 4 {
		ids = append(ids, e.reserve(bot).GetReservationId())
	}
	commit := func(id, key string) error {
		_, err := call(e.ctx, func(ctx context.Context, r *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
			return e.led.Commit(ctx, e.tenant, r)
		}, &cyclesv1.CommitReservationRequest{ReservationId: id, IdempotencyKey: key, Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 7}})
		return err
	}
	for _, c := range []struct {
		id, key string
		want    apierr.Code // "" = success
	}{
		{ids[0], "c0", ""}, {ids[1], "c1", ""}, {ids[2], "c2", apierr.LimitExceeded}, {ids[0], "c0", ""}, {ids[3], "c3", apierr.LimitExceeded},
	} {
		err := commit(c.id, c.key)
		if c.want == "" && err != nil || c.want != "" && !apierr.HasCode(err, c.want) {
			t.Fatalf("commit %s: %v, want %q", c.key, err, c.want)
		}
	}
	botPath := "tenant:" + e.tenant + "/workspace:prod/agent:bot"
	if st, _ := e.rdb.HGet(e.ctx, keys.Tenant(e.tenant).Reservation(ids[2]), "state").Result(); st != "ACTIVE" {
		t.Fatalf("refused commit left the reservation %s", st)
	}
	bal, _ := e.rdb.HGet(e.ctx, keys.Tenant(e.tenant).Budget(botPath, "TOKENS"), keys.BalanceField).Result()
	pb, _ := keys.ParseBalance(bal)
	if b := []int64{pb.Reserved, pb.Spent}; fmt.Sprint(b) != "[20 14]" { // two reservations of 10 still held, two commits of 7
		t.Fatalf("budget reserved/spent %v, want [20 14]", b)
	}
	if _, err := call(e.ctx, func(ctx context.Context, r *cyclesv1.ReleaseReservationRequest) (*cyclesv1.ReleaseReservationResponse, error) {
		return e.led.Release(ctx, e.tenant, r)
	}, &cyclesv1.ReleaseReservationRequest{ReservationId: ids[2], IdempotencyKey: "rel"}); err != nil {
		t.Fatalf("release at the commit limit: %v", err)
	}
	// A reserve is not a commit: the reservation limit is unset here.
	e.reserve(bot)
}

// TestPolicyRateLimitExactUnderConcurrency: N racing reserves (or commits)
// against a limit of K admit exactly min(N, K), and the counter says so, on
// every backend (the Cluster leg with CYCLES_TEST_REDIS=cluster).
func TestPolicyRateLimitExactUnderConcurrency(t *testing.T) {
	for _, be := range redistest.Backends(t) {
		for _, c := range []struct {
			name   string
			n, k   int
			commit bool
		}{{"reserve 40 vs 7", 40, 7, false}, {"reserve 5 vs 9", 5, 9, false}, {"commit 30 vs 11", 30, 11, true}} {
			t.Run(be.Name+"/"+c.name, func(t *testing.T) {
				e := newEnvFor(t, be)
				rl := rates(int32(c.k), 0)
				if c.commit {
					rl = rates(0, int32(c.k))
				}
				e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", RateLimits: rl})
				var ids []string
				if c.commit {
					for range c.n {
						ids = append(ids, e.reserve(bot).GetReservationId())
					}
				}
				e.freshWindow()
				got := raceOutcomes(t, c.n, "OK", func(i int) error {
					if c.commit {
						_, err := e.led.Commit(e.ctx, e.tenant, &cyclesv1.CommitReservationRequest{ReservationId: ids[i],
							IdempotencyKey: fmt.Sprintf("c-%d", i), Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
						return err
					}
					_, err := e.led.Reserve(e.ctx, e.tenant, &cyclesv1.CreateReservationRequest{IdempotencyKey: fmt.Sprintf("race-%d", i),
						Subject: bot, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
						Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 1}})
					return err
				})
				admitsExactly(t, got, "OK", "LIMIT_EXCEEDED", c.n, c.k)
			})
		}
	}
}

// TestPolicyRateLimitTenantObserve: under the tenant's observe mode a live
// reserve at the limit is reported (DENY, reason LIMIT_EXCEEDED, observed),
// not refused, and counts nothing; back under ENFORCE it is refused again.
func TestPolicyRateLimitTenantObserve(t *testing.T) {
	e := newEnv(t)
	e.create(&cyclesv1.CreateScopePolicyRequest{ScopePattern: "*", RateLimits: rates(1, 0)})
	botPath := "tenant:" + e.tenant + "/workspace:prod/agent:bot"
	e.freshWindow()
	observe := func(m cyclesv1.ObserveMode) {
		must(t, e.adm.UpdateTenant, e.ctx, &cyclesv1.UpdateTenantRequest{TenantId: e.tenant, ObserveMode: m})
	}
	for i, s := range []struct {
		mode cyclesv1.ObserveMode // the tenant's, set before the call (0: unchanged)
		want string
	}{
		{0, "ALLOW"},
		{cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE, "DENY"},
		{0, "DENY"},
		{cyclesv1.ObserveMode_OBSERVE_MODE_ENFORCE, "LIMIT_EXCEEDED"},
	} {
		if s.mode != 0 {
			observe(s.mode)
		}
		got, dd, _ := e.try(bot, "llm.completion", "live")
		if got != s.want || got == "DENY" && (dd.GetReasonCode() != "LIMIT_EXCEEDED" || dd.GetBlockedByScope() != botPath) {
			t.Fatalf("step %d: %s %v, want %s", i, got, dd, s.want)
		}
	}
	minute := e.redisNow() / 60_000
	if v, _ := e.rdb.HGet(e.ctx, keys.Tenant(e.tenant).PolicyRate(strconv.FormatInt(minute, 10)), "r|"+botPath).Result(); v != "1" {
		t.Fatalf("counter %q after observed calls, want 1", v)
	}
}
