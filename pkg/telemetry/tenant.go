package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cyclesgo/cycles-go/pkg/auth"
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

// Add records incr, with attribute tenant=<caller's tenant> when labelling.
func (c TenantCounter) Add(ctx context.Context, incr int64, opts ...metric.AddOption) {
	if c.label {
		if p, ok := auth.FromContext(ctx); ok && p.Tenant != "" {
			opts = append(opts, metric.WithAttributes(attribute.String("tenant", p.Tenant)))
		}
	}
	c.Int64Counter.Add(ctx, incr, opts...)
}
