package ledger

import (
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
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

// The canonical copies below are built field by field: the canonicalizations
// replace top-level fields only, so the copy shares the request's
// sub-messages, lists and maps instead of a deep proto.Clone (which was most
// of the hashing cost); the deterministic encoding is byte for byte the one
// of a deep clone (TestPayloadHashesAreStable), and a field added to one of
// these messages fails TestPayloadHashCopiesEveryField until it is copied
// here. The copies are read only (hashed, encoded).

// withTenant returns subj with the effective tenant: subj itself when it
// already names it (the usual request).
func withTenant(subj *cyclesv1.Subject, tenant string) *cyclesv1.Subject {
	if subj == nil {
		return &cyclesv1.Subject{Tenant: tenant}
	}
	if subj.Tenant == tenant {
		return subj
	}
	c := &cyclesv1.Subject{Tenant: tenant, Workspace: subj.Workspace, App: subj.App, Workflow: subj.Workflow,
		Agent: subj.Agent, Toolset: subj.Toolset, Dimensions: subj.Dimensions}
	keepUnknown(c, subj)
	return c
}

// keepUnknown carries src's unknown fields (a newer client's) into dst, as a
// clone would.
func keepUnknown(dst, src proto.Message) {
	if u := src.ProtoReflect().GetUnknown(); len(u) > 0 {
		dst.ProtoReflect().SetUnknown(u)
	}
}

func reserveHash(tenant string, req *cyclesv1.CreateReservationRequest) (string, error) {
	c := &cyclesv1.CreateReservationRequest{IdempotencyKey: req.IdempotencyKey, Subject: withTenant(req.Subject, tenant),
		Action: req.Action, Estimate: req.Estimate, TtlMs: req.TtlMs, GracePeriodMs: req.GracePeriodMs,
		OveragePolicy: req.OveragePolicy, DryRun: req.DryRun, Metadata: req.Metadata, ObserveMode: req.ObserveMode}
	keepUnknown(c, req)
	if c.GracePeriodMs == nil {
		g := int64(DefaultGraceMs)
		c.GracePeriodMs = &g
	}
	return idempotency.PayloadHash(c)
}

func decideHash(tenant string, req *cyclesv1.DecideRequest) (string, error) {
	c := &cyclesv1.DecideRequest{IdempotencyKey: req.IdempotencyKey, Subject: withTenant(req.Subject, tenant),
		Action: req.Action, Estimate: req.Estimate, Metadata: req.Metadata}
	keepUnknown(c, req)
	return idempotency.PayloadHash(c)
}

func eventHash(tenant string, req *cyclesv1.CreateEventRequest) (string, error) {
	c := &cyclesv1.CreateEventRequest{IdempotencyKey: req.IdempotencyKey, Subject: withTenant(req.Subject, tenant),
		Action: req.Action, Actual: req.Actual, OveragePolicy: req.OveragePolicy, Metrics: req.Metrics,
		ClientTimeMs: req.ClientTimeMs, Metadata: req.Metadata}
	keepUnknown(c, req)
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
