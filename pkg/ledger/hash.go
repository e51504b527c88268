package ledger

import (
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/apierr"
	"github.com/cyclesgo/cycles-go/pkg/idempotency"
)

// Idempotency payload identity (docs/protocol.md#idempotency-and-replay): idempotency.PayloadHash of the
// deterministic protobuf encoding of the request after canonicalization:
//
//   - subject.tenant is set to the effective tenant (so omitting it and
//     sending it are the same request);
//   - CreateReservation: grace_period_ms unset is 5000 (its static default);
//   - everything else hashes as sent. In particular an omitted ttl_ms or
//     overage_policy is NOT the same as an explicit value, because those
//     defaults come from the tenant record and may change between retries
//     (this matches the reference server), and client_time_ms is part of an
//     event's payload.
//
// The key itself is part of the payload; map entries (dimensions, metadata)
// are ordered by the deterministic encoding (idempotency.PayloadHash).

// withTenant returns a copy of subj whose tenant is the effective tenant.
func withTenant(subj *cyclesv1.Subject, tenant string) *cyclesv1.Subject {
	c := proto.Clone(subj).(*cyclesv1.Subject)
	if c == nil {
		c = &cyclesv1.Subject{}
	}
	c.Tenant = tenant
	return c
}

func reserveHash(tenant string, req *cyclesv1.CreateReservationRequest) (string, error) {
	c := proto.Clone(req).(*cyclesv1.CreateReservationRequest)
	c.Subject = withTenant(req.GetSubject(), tenant)
	if c.GracePeriodMs == nil {
		g := int64(DefaultGraceMs)
		c.GracePeriodMs = &g
	}
	return idempotency.PayloadHash(c)
}

func decideHash(tenant string, req *cyclesv1.DecideRequest) (string, error) {
	c := proto.Clone(req).(*cyclesv1.DecideRequest)
	c.Subject = withTenant(req.GetSubject(), tenant)
	return idempotency.PayloadHash(c)
}

func eventHash(tenant string, req *cyclesv1.CreateEventRequest) (string, error) {
	c := proto.Clone(req).(*cyclesv1.CreateEventRequest)
	c.Subject = withTenant(req.GetSubject(), tenant)
	return idempotency.PayloadHash(c)
}

// checkSubjectTenant refuses a subject naming another tenant
// (docs/protocol.md#scopes-and-budgets: exact, case-sensitive compare). The API layer checks this too;
// the ledger re-checks because it is the authority on whose budgets move.
func checkSubjectTenant(tenant string, subj *cyclesv1.Subject) error {
	if t := subj.GetTenant(); t != "" && t != tenant {
		return apierr.New(apierr.Forbidden, "subject.tenant %q does not match the caller's tenant", t)
	}
	return nil
}
