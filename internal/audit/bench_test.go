package audit_test

import (
	"context"
	"strconv"
	"testing"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/audit"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// BenchmarkAuditedFund measures an audited admin mutation end to end over
// gRPC (FundBudget: the script appends its entry) and reports what one entry
// costs Redis: stream bytes per entry (MEMORY USAGE of the tenant's audit
// stream over its length) and the entry's field bytes as stored.
func BenchmarkAuditedFund(b *testing.B) {
	for _, audited := range []bool{false, true} {
		b.Run("audited="+strconv.FormatBool(audited), func(b *testing.B) { benchFund(b, audited) })
	}
}

func benchFund(b *testing.B, audited bool) {
	e := startWith(b, redistest.SharedClient(b), audit.Options{}, audited)
	f := &fx{e: e, tenant: e.tenant()}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, err := e.adm.FundBudget(adminCtx("bench-"+strconv.Itoa(i)), &cyclesv1.FundBudgetRequest{TenantId: f.tenant, ScopePath: f.scope(""),
			Unit: cyclesv1.Unit_UNIT_TOKENS, Operation: cyclesv1.FundingOperation_FUNDING_OPERATION_CREDIT, Amount: 1,
			IdempotencyKey: "bench-" + strconv.Itoa(i)})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	k := keys.Tenant(f.tenant).Audit()
	n := e.c.XLen(ctx, k).Val()
	mem := e.c.MemoryUsage(ctx, k, 0).Val()
	if n > 0 {
		b.ReportMetric(float64(mem)/float64(n), "stream-B/entry")
		last := e.c.XRevRangeN(ctx, k, "+", "-", 1).Val()[0]
		raw := len(last.ID)
		for fk, v := range last.Values {
			raw += len(fk) + len(v.(string))
		}
		b.ReportMetric(float64(raw), "field-B/entry")
	}
}
