package server

import (
	"context"

	"google.golang.org/grpc"

	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
)

// The scope-filter check: the one place an API key's scope_filter is
// enforced, for every method and both wires (the HTTP wire runs this chain
// through Invoke). It runs after validation, so the scope a request names is
// well formed. What names a scope is internal/scopefilter.Named; a reservation
// read by id is checked on its answer (scopefilter.Answered), which a read
// may reveal to no one else; a reservation settled by id (commit, release,
// extend) is checked by the script that settles it, with the filter this step
// hands down (scopefilter.WithGuard), before that script changes anything.

// scopeDenied is the refusal for a request naming a scope outside the
// caller's filter; nil for the admin key, keys without a filter, and requests
// that name no scope.
func scopeDenied(ctx context.Context, req any) error {
	p, ok := auth.FromContext(ctx)
	if !ok || p.Admin || len(p.ScopeFilter) == 0 {
		return nil
	}
	if segs, field, named := scopefilter.Named(p.Tenant, req); named && !scopefilter.Allows(p.ScopeFilter, segs) {
		return scopefilter.Refusal(field, segs)
	}
	return nil
}

func scopeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := scopeDenied(ctx, req); err != nil {
		return nil, err
	}
	p, ok := auth.FromContext(ctx)
	filtered := ok && !p.Admin && len(p.ScopeFilter) > 0
	if filtered && scopefilter.NamesReservation(req) {
		ctx = scopefilter.WithGuard(ctx, p.ScopeFilter)
	}
	resp, err := h(ctx, req)
	if err != nil {
		return resp, err
	}
	if filtered {
		if segs, answered := scopefilter.Answered(p.Tenant, resp); answered && !scopefilter.Allows(p.ScopeFilter, segs) {
			return nil, scopefilter.Refusal("reservation_id", segs)
		}
	}
	return resp, nil
}
