package cycleshttp_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
)

// rateOutcome is what one call got, the same on both wires: the HTTP status
// (gRPC: the status the code maps to), the error code or the decision, the
// deny reason, the Retry-After seconds ("" none) and the refusal's scope.
type rateOutcome struct {
	status           int
	code, reason     string
	retry, scope     string
	resetHeader, pol bool
}

// TestPolicyRateLimitsBothWires: a policy's rate_limits on the Cycles HTTP
// wire and on gRPC, step by step: reserves up to max_reservations_per_minute,
// then 429 LIMIT_EXCEEDED (Retry-After, X-RateLimit-Reset; gRPC
// RESOURCE_EXHAUSTED with ErrorInfo reason LIMIT_EXCEEDED and RetryInfo); a
// dry run and a decide at the limit answer DENY (reason LIMIT_EXCEEDED);
// commits up to max_commits_per_minute, then the same refusal. Every HTTP
// answer validates against the contract's schemas.
func TestPolicyRateLimitsBothWires(t *testing.T) {
	v := contract(t)
	for _, wire := range []string{"http", "grpc"} {
		t.Run(wire, func(t *testing.T) {
			var rec []exchange
			e := startFull(t)
			e.rec = &rec
			tenant := strings.ReplaceAll(ledgertest.NewTenantID(t), "_", "-")
			as := []string{"X-Admin-API-Key", adminKey}
			e.call("POST", "/v1/admin/tenants", "", `{"tenant_id":"`+tenant+`","name":"R"}`, as...).must(t, 201, "tenant")
			key := e.call("POST", "/v1/admin/api-keys", "", `{"tenant_id":"`+tenant+`","name":"k"}`, as...).must(t, 201, "key")["key_secret"].(string)
			e.call("POST", "/v1/admin/budgets", "", `{"tenant_id":"`+tenant+`","scope":"tenant:`+tenant+`","unit":"TOKENS","allocated":{"unit":"TOKENS","amount":100000}}`, as...).must(t, 201, "budget")
			e.call("POST", "/v1/admin/policies", "", `{"tenant_id":"`+tenant+`","name":"rl","scope_pattern":"tenant:`+tenant+`/*",`+
				`"rate_limits":{"max_reservations_per_minute":2,"max_commits_per_minute":1}}`, as...).must(t, 201, "policy")
			scope := "tenant:" + tenant + "/workspace:prod/agent:bot"
			auditCount := func() int {
				t.Helper()
				logs, _ := e.call("GET", "/v1/admin/audit/logs?tenant_id="+tenant+"&limit=100", "", "", as...).must(t, 200, "audit")["logs"].([]any)
				return len(logs)
			}
			audit0 := auditCount()
			ledgertest.ClearOfBoundary(t, e.c, time.Minute, 8*time.Second)

			gctx := metadata.AppendToOutgoingContext(context.Background(), "x-cycles-api-key", key)
			rt := cyclesv1.NewRuntimeServiceClient(e.conn)
			var rids []string
			n := 0
			reserve := func(dry bool) rateOutcome {
				t.Helper()
				n++
				ik := wire + "-r" + strconv.Itoa(n)
				if wire == "http" {
					extra := ""
					if dry {
						extra = `,"dry_run":true`
					}
					r := e.call("POST", "/v1/reservations", "", `{"idempotency_key":"`+ik+`","subject":{"workspace":"prod","agent":"bot"},`+
						`"action":{"kind":"llm.completion","name":"m"},"estimate":{"unit":"TOKENS","amount":5}`+extra+`}`, "X-Cycles-API-Key", key)
					o := httpOutcome(t, r)
					if id, _ := r.obj(t)["reservation_id"].(string); id != "" {
						rids = append(rids, id)
					}
					return o
				}
				resp, err := rt.CreateReservation(gctx, &cyclesv1.CreateReservationRequest{IdempotencyKey: ik,
					Subject: &cyclesv1.Subject{Workspace: "prod", Agent: "bot"}, Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"},
					Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5}, DryRun: dry})
				if err != nil {
					return grpcOutcome(t, err)
				}
				if resp.GetReservationId() != "" {
					rids = append(rids, resp.GetReservationId())
				}
				return rateOutcome{status: 200, code: strings.TrimPrefix(resp.GetDecision().String(), "DECISION_"), reason: resp.GetReasonCode()}
			}
			decide := func() rateOutcome {
				t.Helper()
				n++
				ik := wire + "-d" + strconv.Itoa(n)
				if wire == "http" {
					return httpOutcome(t, e.call("POST", "/v1/decide", "", `{"idempotency_key":"`+ik+`","subject":{"workspace":"prod","agent":"bot"},`+
						`"action":{"kind":"llm.completion","name":"m"},"estimate":{"unit":"TOKENS","amount":5}}`, "X-Cycles-API-Key", key))
				}
				resp, err := rt.Decide(gctx, &cyclesv1.DecideRequest{IdempotencyKey: ik, Subject: &cyclesv1.Subject{Workspace: "prod", Agent: "bot"},
					Action: &cyclesv1.Action{Kind: "llm.completion", Name: "m"}, Estimate: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 5}})
				if err != nil {
					return grpcOutcome(t, err)
				}
				return rateOutcome{status: 200, code: strings.TrimPrefix(resp.GetDecision().String(), "DECISION_"), reason: resp.GetReasonCode()}
			}
			commit := func(i int) rateOutcome {
				t.Helper()
				ik := wire + "-c" + strconv.Itoa(i)
				if wire == "http" {
					return httpOutcome(t, e.call("POST", "/v1/reservations/"+rids[i]+"/commit", "", `{"idempotency_key":"`+ik+`","actual":{"unit":"TOKENS","amount":3}}`, "X-Cycles-API-Key", key))
				}
				_, err := rt.CommitReservation(gctx, &cyclesv1.CommitReservationRequest{ReservationId: rids[i], IdempotencyKey: ik,
					Actual: &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: 3}})
				if err != nil {
					return grpcOutcome(t, err)
				}
				return rateOutcome{status: 200, code: "COMMITTED"}
			}
			limited := rateOutcome{status: 429, code: "LIMIT_EXCEEDED", retry: "set", scope: scope, resetHeader: wire == "http", pol: true}
			for i, s := range []struct {
				what string
				call func() rateOutcome
				want rateOutcome
			}{
				{"reserve 1", func() rateOutcome { return reserve(false) }, rateOutcome{status: 200, code: "ALLOW"}},
				{"dry run under the limit", func() rateOutcome { return reserve(true) }, rateOutcome{status: 200, code: "ALLOW"}},
				{"reserve 2", func() rateOutcome { return reserve(false) }, rateOutcome{status: 200, code: "ALLOW"}},
				{"reserve 3: limited", func() rateOutcome { return reserve(false) }, limited},
				{"dry run at the limit", func() rateOutcome { return reserve(true) }, rateOutcome{status: 200, code: "DENY", reason: "LIMIT_EXCEEDED"}},
				{"decide at the limit", decide, rateOutcome{status: 200, code: "DENY", reason: "LIMIT_EXCEEDED"}},
				{"commit 1", func() rateOutcome { return commit(0) }, rateOutcome{status: 200, code: "COMMITTED"}},
				{"commit 2: limited", func() rateOutcome { return commit(1) }, limited},
			} {
				got := s.call()
				if got.retry != "" {
					secs, err := strconv.Atoi(got.retry)
					if err != nil || secs < 1 || secs > 60 {
						t.Fatalf("step %d %s: Retry-After %q", i, s.what, got.retry)
					}
					got.retry = "set"
				}
				if got != s.want {
					t.Fatalf("step %d %s: %+v, want %+v", i, s.what, got, s.want)
				}
			}
			// Audit unchanged: runtime calls by a tenant key, admitted or
			// limited, write no audit entry (as before rate limits).
			if got := auditCount(); got != audit0 {
				t.Fatalf("audit entries %d after the runtime calls, want %d", got, audit0)
			}
			for _, x := range rec {
				if strings.HasPrefix(x.path, "/v1/reservations") || x.path == "/v1/decide" {
					check(t, v, x)
				}
			}
		})
	}
}

func httpOutcome(t *testing.T, r reply) rateOutcome {
	t.Helper()
	m := r.obj(t)
	o := rateOutcome{status: r.status, retry: r.header.Get("Retry-After"), resetHeader: r.header.Get("X-RateLimit-Reset") != ""}
	if r.status == 200 {
		o.code, _ = m["decision"].(string)
		if s, _ := m["status"].(string); s == "COMMITTED" {
			o.code = s
		}
		// LIMIT_EXCEEDED is a v0.1.25 reason: reason_code, no deny_detail
		// for a v0.1.25 client (terse).
		o.reason, _ = m["reason_code"].(string)
		if _, has := m["deny_detail"]; has {
			t.Fatalf("deny_detail sent to a v0.1.25 request: %s", r.body)
		}
		return o
	}
	o.code, _ = m["error"].(string)
	d, _ := m["details"].(map[string]any)
	o.scope, _ = d["scope"].(string)
	id, _ := d["policy_id"].(string)
	o.pol = strings.HasPrefix(id, "pol_")
	if lim, _ := d["limit"].(json.Number); o.code == "LIMIT_EXCEEDED" && lim == "" {
		t.Fatalf("429 details without a numeric limit: %s", r.body)
	}
	return o
}

func grpcOutcome(t *testing.T, err error) rateOutcome {
	t.Helper()
	st, _ := status.FromError(err)
	code, md, ok := apierr.FromStatus(err)
	if !ok {
		t.Fatalf("no ErrorInfo: %v", err)
	}
	o := rateOutcome{status: code.HTTPStatus(), code: string(code), scope: md["scope"], pol: strings.HasPrefix(md["policy_id"], "pol_")}
	if code == apierr.LimitExceeded && st.Code() != codes.ResourceExhausted {
		t.Fatalf("LIMIT_EXCEEDED as %v", st.Code())
	}
	for _, d := range st.Details() {
		if ri, isRetry := d.(*errdetails.RetryInfo); isRetry {
			o.retry = strconv.FormatInt(int64(ri.GetRetryDelay().AsDuration().Seconds()+0.999), 10)
		}
	}
	return o
}
