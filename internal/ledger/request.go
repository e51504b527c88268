package ledger

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// creating is what the script of a creating request (reserve, decide,
// event) takes from it, worked out once and in one place before the script
// runs, in the order the work needs: whose it is, the budgets it touches,
// its payload identity, the JSON its record keeps and its action's
// governance. Every step reads the one tenant-filled subject built first, so
// a request is canonicalized once.
type creating struct {
	*derived
	hash     string // idempotency payload hash (below)
	subject  string // stored JSON of the tenant-filled subject
	action   string // stored JSON ("" none)
	metadata string // stored JSON ("" none; decide keeps none)

	overage string // the request's overage policy (scope.PolicyKey; "" the tenant's): reserve, event
	observe string // observeArg: reserve

	// Action governance (lua/lib/quota.lua): reserve, decide.
	kind, risk, runID, policyKeys string
}

// newCreating works out req, a *CreateReservationRequest, *DecideRequest or
// *CreateEventRequest, for tenant.
func (l *Ledger) newCreating(tenant string, req proto.Message) (*creating, error) {
	var (
		c       = &creating{}
		subj    *cyclesv1.Subject
		unit    cyclesv1.Unit
		action  *cyclesv1.Action
		meta    proto.Message
		overage cyclesv1.CommitOveragePolicy
		// governed: the request's action goes through action governance
		// (reserve and decide; an event records a cost after the fact).
		governed bool
	)
	switch r := req.(type) {
	case *cyclesv1.CreateReservationRequest:
		subj, unit, action, meta, overage = r.GetSubject(), r.GetEstimate().GetUnit(), r.GetAction(), r.GetMetadata(), r.GetOveragePolicy()
		c.observe, governed = observeArg(r.GetObserveMode()), true
	case *cyclesv1.DecideRequest:
		subj, unit, action, governed = r.GetSubject(), r.GetEstimate().GetUnit(), r.GetAction(), true
	case *cyclesv1.CreateEventRequest:
		subj, unit, action, meta, overage = r.GetSubject(), r.GetActual().GetUnit(), r.GetAction(), r.GetMetadata(), r.GetOveragePolicy()
	default:
		return nil, fmt.Errorf("ledger: %T is not a creating request", req)
	}
	if err := checkSubjectTenant(tenant, subj); err != nil {
		return nil, err
	}
	subj = withTenant(subj, tenant)
	var err error
	if c.derived, c.overage, err = derive(tenant, subj, unit, overage); err != nil {
		return nil, err
	}
	canon := canonical(req, subj)
	if c.hash, err = idempotency.PayloadHash(canon); err != nil {
		return nil, err
	}
	if c.subject, c.action, c.metadata, err = storedJSON(subj, action, meta); err != nil {
		return nil, err
	}
	if governed {
		kind := action.GetKind()
		c.kind, c.policyKeys = kind, l.kinds.MatchKeys(kind, action.GetPolicyKeys())
		c.risk, c.runID = string(l.kinds.Classify(kind).Risk), subj.GetDimensions()["run_id"]
	}
	return c, nil
}

// observeArg is the reserve script's observe-mode ARGV: "" when the request
// leaves it to the tenant, else the mode's wire name.
func observeArg(m cyclesv1.ObserveMode) string {
	if m == cyclesv1.ObserveMode_OBSERVE_MODE_UNSPECIFIED {
		return ""
	}
	return actionkind.ObserveModeName(m)
}

// derived is the scope derivation of a request plus the budget key of every
// affected scope in the request unit (canonical order).
type derived struct {
	scope.Derived
	unit       string
	budgetKeys []string
	affected   string // JSON array, or "" when they are Path's prefixes
}

// derive works out the scopes of subj (checked and tenant-filled), and the
// script forms of the unit and of the overage policy.
func derive(tenant string, subj *cyclesv1.Subject, unit cyclesv1.Unit, overage cyclesv1.CommitOveragePolicy) (*derived, string, error) {
	d, err := scope.Derive(tenant, subj)
	u, pol := scope.UnitKey(unit), scope.PolicyKey(overage)
	if err != nil {
		return nil, "", apierr.Invalid("subject", "%v", err)
	}
	if u == "" {
		return nil, "", apierr.Invalid("unit", "must be one of USD_MICROCENTS, TOKENS, CREDITS, RISK_POINTS")
	}
	t := keys.Tenant(tenant)
	out := &derived{Derived: d, unit: u, budgetKeys: make([]string, len(d.Affected))}
	for i, s := range d.Affected {
		out.budgetKeys[i] = t.Budget(s, u)
	}
	// Derive's affected scopes are the path's prefixes; the scripts then
	// rebuild them from the path (lua/lib/ledger_snapshot.lua affected_arg)
	// instead of decoding a JSON array on every call.
	if !isPrefixChain(d.Affected, d.Path) {
		aff, err := json.Marshal(d.Affected)
		if err != nil {
			return nil, "", fmt.Errorf("encode affected scopes: %w", err)
		}
		out.affected = string(aff)
	}
	return out, pol, nil
}

// isPrefixChain reports whether aff is exactly keys.ScopePrefixes(path), without
// building that slice on every request.
func isPrefixChain(aff []string, path string) bool {
	n := 0
	for i := 0; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		if n >= len(aff) || aff[n] != path[:i] {
			return false
		}
		n++
	}
	return n == len(aff)
}

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

// canonical is req's canonical copy around subj, the tenant-filled subject.
func canonical(req proto.Message, subj *cyclesv1.Subject) proto.Message {
	switch r := req.(type) {
	case *cyclesv1.CreateReservationRequest:
		return reserveCanonical(r, subj)
	case *cyclesv1.DecideRequest:
		return decideCanonical(r, subj)
	default:
		return eventCanonical(r.(*cyclesv1.CreateEventRequest), subj)
	}
}

// reserveCanonical is req's canonical copy around subj (the tenant-filled
// subject): grace_period_ms unset is its static default.
func reserveCanonical(req *cyclesv1.CreateReservationRequest, subj *cyclesv1.Subject) proto.Message {
	c := &cyclesv1.CreateReservationRequest{IdempotencyKey: req.IdempotencyKey, Subject: subj,
		Action: req.Action, Estimate: req.Estimate, TtlMs: req.TtlMs, GracePeriodMs: req.GracePeriodMs,
		OveragePolicy: req.OveragePolicy, DryRun: req.DryRun, Metadata: req.Metadata, ObserveMode: req.ObserveMode}
	keepUnknown(c, req)
	if c.GracePeriodMs == nil {
		g := int64(DefaultGraceMs)
		c.GracePeriodMs = &g
	}
	return c
}

func decideCanonical(req *cyclesv1.DecideRequest, subj *cyclesv1.Subject) proto.Message {
	c := &cyclesv1.DecideRequest{IdempotencyKey: req.IdempotencyKey, Subject: subj,
		Action: req.Action, Estimate: req.Estimate, Metadata: req.Metadata}
	keepUnknown(c, req)
	return c
}

func eventCanonical(req *cyclesv1.CreateEventRequest, subj *cyclesv1.Subject) proto.Message {
	c := &cyclesv1.CreateEventRequest{IdempotencyKey: req.IdempotencyKey, Subject: subj,
		Action: req.Action, Actual: req.Actual, OveragePolicy: req.OveragePolicy, Metrics: req.Metrics,
		ClientTimeMs: req.ClientTimeMs, Metadata: req.Metadata}
	keepUnknown(c, req)
	return c
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
