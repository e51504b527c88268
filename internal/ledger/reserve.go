package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/attribute"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// derived is the scope derivation of a request plus the budget key of every
// affected scope in the request unit (canonical order).
type derived struct {
	scope.Derived
	unit       string
	budgetKeys []string
	affected   string // JSON array, or "" when they are Path's prefixes
}

func derive(tenant string, subj *cyclesv1.Subject, unit cyclesv1.Unit) (*derived, error) {
	if err := checkSubjectTenant(tenant, subj); err != nil {
		return nil, err
	}
	d, err := scope.Derive(tenant, subj)
	if err != nil {
		return nil, apierr.Invalid("subject", "%v", err)
	}
	u := scope.UnitKey(unit)
	if u == "" {
		return nil, apierr.Invalid("unit", "must be one of USD_MICROCENTS, TOKENS, CREDITS, RISK_POINTS")
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
			return nil, fmt.Errorf("encode affected scopes: %w", err)
		}
		out.affected = string(aff)
	}
	return out, nil
}

// isPrefixChain reports whether aff is exactly scopePrefixes(path), without
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

// Reserve creates a reservation (or evaluates one when req.dry_run) for the
// effective tenant: docs/protocol.md#reserve. A live budget refusal is an error; a
// dry-run refusal is a DENY response.
func (l *Ledger) Reserve(ctx context.Context, tenant string, req *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
	d, err := derive(tenant, req.GetSubject(), req.GetEstimate().GetUnit())
	if err != nil {
		return nil, err
	}
	hash, err := reserveHash(tenant, req)
	if err != nil {
		return nil, err
	}
	subj, action, meta, err := requestJSON(tenant, req.GetSubject(), req.GetAction(), req.GetMetadata())
	if err != nil {
		return nil, err
	}
	if subj == keys.ImpliedSubject(d.Path) {
		// The scope path says it all: the record leaves the subject out
		// (docs/design.md#reservation-records).
		subj = ""
	}
	mode, op := "live", "reserve"
	if req.GetDryRun() {
		mode, op = "dry", "dry_run"
	}
	ttl := ""
	if req.TtlMs != nil {
		ttl = strconv.FormatInt(req.GetTtlMs(), 10)
	}
	grace := int64(DefaultGraceMs)
	if req.GracePeriodMs != nil {
		grace = req.GetGracePeriodMs()
	}
	rid := reservationID(tenant, l.newID())
	t := keys.Tenant(tenant)
	ks := append([]string{
		t.Prefix(), t.Record(), t.Budgets(), t.Reservation(rid), t.Deadlines(), t.Created(),
		t.Expires(), t.Idempotency("reserve", req.GetIdempotencyKey()), t.Events(),
	}, d.budgetKeys...)
	res, snap, err := l.runFlat(ctx, scriptReserve, ks, []any{
		mode, rid, d.unit, strconv.FormatInt(req.GetEstimate().GetAmount(), 10), ttl,
		strconv.FormatInt(grace, 10), scope.PolicyKey(req.GetOveragePolicy()), req.GetIdempotencyKey(),
		hash, d.Path, d.affected, subj, action, meta, l.eventContext(ctx), observeArg(req.GetObserveMode()),
		req.GetAction().GetKind(), string(l.kinds.Classify(req.GetAction().GetKind()).Risk), runID(req.GetSubject()),
		l.kinds.MatchKeys(req.GetAction().GetKind(), req.GetAction().GetPolicyKeys())},
		reserveExtras, reserveFields)
	if err != nil {
		return nil, l.refused(ctx, op, err)
	}
	resp, err := reserveResponse(snap)
	if err != nil {
		return nil, err
	}
	if res.RemTTL != nil && !snap.Dry {
		v := int64(*res.RemTTL)
		resp.RemainingTtlMs = &v
	}
	if res.Replay {
		l.replayed(ctx, op)
		return resp, nil
	}
	switch {
	case snap.Dry:
		l.m.decisions.Add(ctx, 1, attribute.String("operation", op), attribute.String("decision", snap.Decision))
		if res.Denied != "" {
			l.m.denied.Add(ctx, 1, attribute.String("operation", op), attribute.String("reason", res.Denied))
		}
	default:
		l.m.created.Add(ctx, 1, attribute.String("decision", snap.Decision))
	}
	return resp, nil
}

// reserveResponse builds the response from a stored snapshot (fresh or replay:
// the same bytes give the same message). remaining_ttl_ms is not part of the
// snapshot: the caller sets it from the script's clock.
func reserveResponse(s *snapshot) (*cyclesv1.CreateReservationResponse, error) {
	unit := scope.ParseUnit(s.Unit)
	caps, err := parseCaps(s.Caps)
	if err != nil {
		return nil, err
	}
	dd, err := actionkind.ParseDenyDetail(s.DenyDetail)
	if err != nil {
		return nil, err
	}
	resp := &cyclesv1.CreateReservationResponse{
		DenyDetail:     dd,
		Observed:       s.Observed,
		Decision:       decision(s.Decision),
		ReservationId:  s.ReservationID,
		ExpiresAtMs:    int64(s.ExpiresAtMs),
		ScopePath:      s.ScopePath,
		AffectedScopes: s.Affected,
		Caps:           caps,
		Balances:       balances(unit, s.Balances),
		ReasonCode:     s.ReasonCode,
		GracePeriodMs:  int64(s.GraceMs),
		OveragePolicy:  scope.ParsePolicy(s.Policy),
	}
	if s.Reserved != nil {
		resp.Reserved = amount(unit, *s.Reserved)
	}
	return resp, nil
}

// Decide evaluates a reservation without making one: docs/protocol.md#dry-run-and-decide.
// Budget and tenant conditions are DENY results.
func (l *Ledger) Decide(ctx context.Context, tenant string, req *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
	d, err := derive(tenant, req.GetSubject(), req.GetEstimate().GetUnit())
	if err != nil {
		return nil, err
	}
	hash, err := decideHash(tenant, req)
	if err != nil {
		return nil, err
	}
	subj, action, _, err := requestJSON(tenant, req.GetSubject(), req.GetAction(), nil)
	if err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	ks := append([]string{t.Prefix(), t.Record(), t.Budgets(), t.Idempotency("decide", req.GetIdempotencyKey()), t.Events()},
		d.budgetKeys...)
	res, snap, err := l.runFlat(ctx, scriptDecide, ks, []any{
		d.unit, strconv.FormatInt(req.GetEstimate().GetAmount(), 10), req.GetIdempotencyKey(), hash,
		d.Path, d.affected, subj, action, l.eventContext(ctx),
		req.GetAction().GetKind(), string(l.kinds.Classify(req.GetAction().GetKind()).Risk), runID(req.GetSubject()),
		l.kinds.MatchKeys(req.GetAction().GetKind(), req.GetAction().GetPolicyKeys())},
		decideExtras, decideFields)
	if err != nil {
		return nil, l.refused(ctx, "decide", err)
	}
	caps, err := parseCaps(snap.Caps)
	if err != nil {
		return nil, err
	}
	dd, err := actionkind.ParseDenyDetail(snap.DenyDetail)
	if err != nil {
		return nil, err
	}
	resp := &cyclesv1.DecideResponse{
		Decision:       decision(snap.Decision),
		Caps:           caps,
		ReasonCode:     snap.ReasonCode,
		AffectedScopes: snap.Affected,
		DenyDetail:     dd,
	}
	if res.Replay {
		l.replayed(ctx, "decide")
		return resp, nil
	}
	l.m.decisions.Add(ctx, 1, attribute.String("operation", "decide"), attribute.String("decision", snap.Decision))
	if res.Denied != "" {
		l.m.denied.Add(ctx, 1, attribute.String("operation", "decide"), attribute.String("reason", res.Denied))
	}
	return resp, nil
}

// observeArg is the reserve script's observe-mode ARGV: ” when the request
// leaves it to the tenant, else the mode's wire name.
func observeArg(m cyclesv1.ObserveMode) string {
	if m == cyclesv1.ObserveMode_OBSERVE_MODE_UNSPECIFIED {
		return ""
	}
	return actionkind.ObserveModeName(m)
}

// runID is Subject.dimensions.run_id, the window key of per_run quotas ("" = none).
func runID(s *cyclesv1.Subject) string { return s.GetDimensions()["run_id"] }
