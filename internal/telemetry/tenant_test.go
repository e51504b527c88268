package telemetry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/telemetry"
	"github.com/cyclesgo/cycles-go/internal/telemetry/telemetrytest"
)

func TestTenantCounterLabelsOnlyWhenAsked(t *testing.T) {
	for _, label := range []bool{true, false} {
		r := telemetrytest.New()
		c := telemetry.NewTenantCounter(telemetry.Meter(r.Provider, "t"), "cycles.test.tenanted", "x", label)
		ctx := auth.WithPrincipal(context.Background(), auth.Principal{Tenant: "acme"})
		c.Add(ctx, 2, attribute.String("reason", "r"))
		c.Add(context.Background(), 1) // no principal: no tenant label
		withTenant := r.Sum(t, "cycles.test.tenanted", attribute.String("tenant", "acme"), attribute.String("reason", "r"))
		if total := r.Sum(t, "cycles.test.tenanted"); total != 3 {
			t.Fatalf("label=%v: total %d, want 3", label, total)
		}
		if want := map[bool]int64{true: 2, false: 0}[label]; withTenant != want {
			t.Fatalf("label=%v: tenant-labelled sum %d, want %d", label, withTenant, want)
		}
	}
}

// BenchmarkTenantCounterAdd is the per-call cost of a labelled counter with
// one attribute of its own, as the ledger records a reservation.
func BenchmarkTenantCounterAdd(b *testing.B) {
	r := telemetrytest.New()
	c := telemetry.NewTenantCounter(telemetry.Meter(r.Provider, "t"), "cycles.test.tenanted", "x", true)
	ctx := auth.WithPrincipal(context.Background(), auth.Principal{Tenant: "acme"})
	b.ReportAllocs()
	for b.Loop() {
		c.Add(ctx, 1, attribute.String("decision", "ALLOW"))
	}
}
