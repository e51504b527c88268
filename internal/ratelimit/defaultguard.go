package ratelimit

import (
	"context"

	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// DefaultGuardPolicyName is the policy -guard-policy names by default.
// cyclesd creates it at start when it does not exist (DefaultGuardPolicy);
// an operator may change it like any policy (UpdatePolicy), and those
// changes stand: it is never overwritten.
const DefaultGuardPolicyName = "cyclesd-default-guard"

// DefaultGuardPolicy is the per-API-key guard every runtime RPC passes with
// the defaults: a token bucket of 2,000 calls refilled at 1,000 calls/s.
//
// Why these numbers: a denied Decide leaves about 690 B in Redis (its
// event, kept for -event-retention, and its idempotency record, kept a
// day); unguarded, one key wrote about 8 MB/s that way. At 1,000 calls/s a
// key writes at most about 0.7 MB/s, an order of magnitude less, while
// every measured workload of one key (the e2e and abuse suites, a few
// hundred calls/s) stays well under the limit. It slows a fill, it does not
// bound it: size maxmemory and -event-retention for the keys you serve
// (docs/limits.md "Denied decides").
func DefaultGuardPolicy() Policy {
	return Policy{Name: DefaultGuardPolicyName, Algorithm: TokenBucket, Limit: 2000, WindowMs: 2000}
}

// EnsurePolicy creates p unless a policy of that name exists (then the
// stored one stands). created reports whether it was created now.
func (l *Limiter) EnsurePolicy(ctx context.Context, p Policy) (created bool, err error) {
	_, err = l.CreatePolicy(ctx, p)
	if apierr.HasCode(err, apierr.DuplicateResource) {
		return false, nil
	}
	return err == nil, err
}
