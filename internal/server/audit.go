package server

import (
	"context"

	"google.golang.org/grpc"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Auditor records the audited calls and the refused authentications
// (internal/audit).
type Auditor interface {
	// Intercept is the chain's audit step, right after authentication, so
	// every refusal after it (size, rate limit, validation, the domain) is
	// recorded with the caller it names.
	Intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error)
	// AuthRefused records one refused authentication of the peer peerKey
	// (aggregated per peer and minute by the auditor).
	AuthRefused(ctx context.Context, peerKey string, err error)
}

// authRefused tells the auditor about a refused authentication; refusals
// for other reasons (throttling, in-flight bounds) are not audited: they are
// the flood the aggregation exists to absorb.
func (a *authenticator) authRefused(ctx context.Context, pk string, err error) {
	if a.audit != nil && apierr.HasCode(err, apierr.Unauthorized) {
		a.audit.AuthRefused(ctx, pk, err)
	}
}
