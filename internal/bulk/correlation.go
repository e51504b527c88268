package bulk

import (
	"context"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/reqctx"
)

// correlated gives every event a bulk action's rows emit the correlation id
// the governance spec sets for it: "<plane>_bulk_action:<action>:<request
// id>", the action lowercased without its enum prefix (tenant_bulk_action:
// close:req_abc, budget_bulk_action:credit:req_abc), so
// GET /v1/admin/events?correlation_id= returns the whole fan-out. The
// request id is the call's (every transport sets one). A tenant close's
// cascade keeps its own id (lua/ledger/release_for_close.lua).
func correlated(ctx context.Context, plane, action, enumPrefix string) context.Context {
	a := strings.ToLower(strings.TrimPrefix(action, enumPrefix))
	return eventctx.WithCorrelation(ctx, plane+"_bulk_action:"+a+":"+reqctx.RequestID(ctx))
}
