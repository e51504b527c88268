package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/internal/auth"
)

// TenantCounter is an Int64Counter that labels every measurement with the
// caller's tenant (the auth principal in the context) when enabled. Per-tenant
// counts are what an operator of a budget service usually wants; deployments
// with very many tenants turn the label off (-metrics-tenant-label=false) to
// bound cardinality.
type TenantCounter struct {
	metric.Int64Counter
	label bool
}

// NewTenantCounter creates the counter; label says whether to add "tenant".
func NewTenantCounter(m metric.Meter, name, desc string, label bool) TenantCounter {
	return TenantCounter{Int64Counter: MustCounter(m, name, desc), label: label}
}

// Add records incr with attrs, plus tenant=<caller's tenant> when labelling.
// It takes the attributes rather than AddOptions so that the tenant joins
// them in ONE attribute set: a second WithAttributes option costs a second
// set and a merge in the SDK on every call (measured ~2x the allocations).
func (c TenantCounter) Add(ctx context.Context, incr int64, attrs ...attribute.KeyValue) {
	if c.label {
		if p, ok := auth.FromContext(ctx); ok && p.Tenant != "" {
			attrs = append(attrs, attribute.String("tenant", p.Tenant))
		}
	}
	if len(attrs) == 0 {
		c.Int64Counter.Add(ctx, incr)
		return
	}
	c.Int64Counter.Add(ctx, incr, metric.WithAttributes(attrs...))
}
