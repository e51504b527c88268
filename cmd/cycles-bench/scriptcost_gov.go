package main

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"time"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/policy"
)

// benchGovernance gives tenant the v0.1.26 governance of the reserve-gov5
// cell (BENCHMARKS.md, "Action governance"): one ACTIVE policy on every
// scope with an allowlist of 12 kinds that admits the bench reserve's kind,
// and 5 quotas that all govern it, so every reserve checks and counts five
// counters (the worst case for 5 quotas): 4 action quotas on llm.completion
// (per_minute, per_hour, per_day, per_tenant_per_day) and the risk-class
// quota of its class (side_effect, per_day). The limits are high enough
// never to refuse within a run.
func benchGovernance(ctx context.Context, svc *policy.Service, tenant string) error {
	const max = 100_000
	aq := func(w cyclesv1.ActionQuotaWindow) *cyclesv1.ActionQuota {
		return &cyclesv1.ActionQuota{ActionKind: "llm.completion", MaxCalls: max, Window: w}
	}
	req := &cyclesv1.CreateScopePolicyRequest{TenantId: tenant, Name: "bench-gov", ScopePattern: "*",
		AllowedActionKinds: []string{"llm.completion", "llm.embedding", "tool.search.web", "tool.http.get", "db.query.read",
			"file.read", "file.write", "message.email.send", "message.slack.post", "code.execute", "agent.spawn", "vector.search"},
		ActionQuotas: []*cyclesv1.ActionQuota{aq(cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_MINUTE_TUMBLING),
			aq(cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING), aq(cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_DAY_TUMBLING),
			aq(cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_TENANT_PER_DAY)},
		RiskClassQuotas: []*cyclesv1.RiskClassQuota{{RiskClass: cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_SIDE_EFFECT,
			MaxCalls: max, Window: cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_DAY_TUMBLING}}}
	if _, err := svc.CreateScopePolicy(ctx, req); err != nil {
		return fmt.Errorf("create governance policy: %w", err)
	}
	return nil
}

// processCPU is this process's user+system CPU time so far: the bench
// calls go through the same domain packages cyclesd runs (ledger, script
// executor, reply decoding), so its growth over n calls is cyclesd's CPU per
// operation without the transport.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocs is this process's heap allocations so far (runtime.MemStats
// Mallocs and TotalAlloc). Unlike CPU time it does not move with the load of
// a shared machine, so its growth per call is the steadier figure of the Go
// side's work per operation (BENCHMARKS.md, "Action governance").
type allocs struct{ objects, bytes float64 }

func processAllocs() allocs {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return allocs{float64(m.Mallocs), float64(m.TotalAlloc)}
}

// per is the growth since a0 per call over n calls.
func (a allocs) per(a0 allocs, n int) allocs {
	return allocs{(a.objects - a0.objects) / float64(n), (a.bytes - a0.bytes) / float64(n)}
}
