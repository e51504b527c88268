package scopefilter

import (
	"context"
	"strings"
)

// A request that names a reservation by id (commit, release, extend) names a
// scope only the reservation's record knows. Reading it first and settling
// after would be two calls; instead the scope step (internal/server) hands
// the key's filter down with WithGuard, the ledger passes ScriptArg to the
// script that settles the reservation, and the script refuses with the same
// FORBIDDEN / reason scope_filter as Refusal before it changes anything
// (lua/lib/scope_filter.lua holds the same test as Allows, over the record's
// scope path).

// reservationRequest is the shape of a request naming a reservation by id.
type reservationRequest interface{ GetReservationId() string }

// NamesReservation reports whether req names a reservation by id.
func NamesReservation(req any) bool {
	_, ok := req.(reservationRequest)
	return ok
}

type guardKey struct{}

// WithGuard returns ctx carrying the canonical filter a script must enforce
// on the reservation the request names; an empty filter carries nothing.
func WithGuard(ctx context.Context, filter []string) context.Context {
	if len(filter) == 0 {
		return ctx
	}
	return context.WithValue(ctx, guardKey{}, strings.Join(filter, ","))
}

// ScriptArg is the filter ARGV of a script settling a reservation: the
// canonical patterns joined by ',' (a character no pattern holds), or ""
// when the caller's key has no filter.
func ScriptArg(ctx context.Context) string {
	s, _ := ctx.Value(guardKey{}).(string)
	return s
}
