package validate

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// The public action-kind registry (internal/actionkind): filters and page
// bounds are checked by the registry itself, which owns them; here only what
// is malformed whatever the registry holds.
func init() {
	register(func(r *cyclesv1.ListActionKindsRequest) error {
		if r.GetLimit() < 0 || r.GetLimit() > 100 {
			return invalid("limit", "must be 1..100")
		}
		return Cursor("cursor", r.GetCursor())
	})
	register(func(r *cyclesv1.GetActionKindRequest) error {
		if r.GetKind() == "" {
			return invalid("kind", "is required")
		}
		return Text("kind", r.GetKind(), 64)
	})
}
