package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// usageMaxScope bounds QueryUsage's scope_prefix (six levels of at most
// 128-byte values with their names).
const usageMaxScope = 1024

func init() {
	// The request's shape; the range and the scope's tenant are checked by
	// internal/usage, which owns their meaning.
	register(func(r *cyclesv1.QueryUsageRequest) error {
		if err := first(
			TenantID("tenant_id", r.GetTenantId()),
			Text("scope_prefix", r.GetScopePrefix(), usageMaxScope),
		); err != nil {
			return err
		}
		if d := r.GetScopeDepth(); d < 0 || d > int32(len(scope.Levels)) {
			return invalid("scope_depth", "must be 0..%d", len(scope.Levels))
		}
		return first(
			declared("bucket", r.GetBucket(), "unknown bucket %d", r.GetBucket()),
			declared("unit", r.GetUnit(), "unknown unit %d", r.GetUnit()),
		)
	})
}
