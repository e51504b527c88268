package ledger

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/reservationid"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Reserve creates a reservation (or evaluates one when req.dry_run) for the
// effective tenant: docs/protocol.md#reserve. A live budget refusal is an error; a
// dry-run refusal is a DENY response.
func (l *Ledger) Reserve(ctx context.Context, tenant string, req *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
	op := "reserve"
	if req.GetDryRun() {
		op = "dry_run"
	}
	ks, args, err := l.reserveCall(ctx, tenant, req, func() string { return reservationid.New(tenant, l.newID()) })
	if err != nil {
		return nil, err
	}
	rep, err := runFlat(ctx, l, scriptReserve, replyReserve, ks, args)
	if err != nil {
		return nil, l.refused(ctx, op, err)
	}
	resp, err := reserveResponse(rep)
	if err != nil {
		return nil, err
	}
	if rep.RemTTL != nil && !rep.Dry {
		v := int64(*rep.RemTTL)
		resp.RemainingTtlMs = &v
	}
	if rep.Replay {
		l.replayed(ctx, op)
		return resp, nil
	}
	switch {
	case rep.Dry:
		l.m.decisions.Add(ctx, 1, attribute.String("operation", op), attribute.String("decision", rep.Decision))
		if rep.Denied != "" {
			l.m.denied.Add(ctx, 1, attribute.String("operation", op), attribute.String("reason", rep.Denied))
		}
	default:
		l.m.created.Add(ctx, 1, attribute.String("decision", rep.Decision))
	}
	return resp, nil
}

// reserveCall is the reserve script's KEYS and ARGV for req, worked out
// here only (Reserve, and ReserveCall for tools); newRID names the
// reservation once the request is known to be valid.
func (l *Ledger) reserveCall(ctx context.Context, tenant string, req *cyclesv1.CreateReservationRequest, newRID func() string) (reserveKeys, reserveArgs, error) {
	d, err := l.newCreating(tenant, req)
	if err != nil {
		return reserveKeys{}, reserveArgs{}, err
	}
	rid := newRID()
	subj := d.subject
	if subj == keys.ImpliedSubject(d.Path) {
		// The scope path says it all: the record leaves the subject out
		// (docs/design.md#reservation-records).
		subj = ""
	}
	mode := "live"
	if req.GetDryRun() {
		mode = "dry"
	}
	ttl := ""
	if req.TtlMs != nil {
		ttl = strconv.FormatInt(req.GetTtlMs(), 10)
	}
	grace := int64(DefaultGraceMs)
	if req.GracePeriodMs != nil {
		grace = req.GetGracePeriodMs()
	}
	t := keys.Tenant(tenant)
	ks := reserveKeys{
		t.Prefix(), t.Record(), t.Budgets(), t.Reservation(rid), t.Deadlines(), t.Created(),
		t.Expires(), t.Idempotency("reserve", req.GetIdempotencyKey()), t.Events(), d.budgetKeys,
	}
	return ks, reserveArgs{
		mode, rid, d.unit, req.GetEstimate().GetAmount(), ttl,
		grace, d.overage, req.GetIdempotencyKey(),
		d.hash, d.Path, d.affected, subj, d.action, d.metadata, l.eventContext(ctx), d.observe,
		d.kind, d.risk, d.runID, d.policyKeys}, nil
}

// reserveResponse builds the response from a reserve's reply (fresh or
// replay: the same fields give the same message). remaining_ttl_ms is not
// part of the answer a replay rebuilds: the caller sets it from the
// script's clock.
func reserveResponse(s *reserveReply) (*cyclesv1.CreateReservationResponse, error) {
	unit := scope.ParseUnit(s.Unit)
	caps, dd, err := capsAndDenial(s.Caps, s.DenyDetail)
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
		AffectedScopes: s.affected(),
		Caps:           caps,
		Balances:       balances(unit, s.Balances),
		ReasonCode:     s.ReasonCode,
		GracePeriodMs:  int64(s.GraceMs),
		OveragePolicy:  scope.ParsePolicy(s.Policy),
		Reserved:       optAmount(unit, s.Reserved),
	}
	return resp, nil
}

// Decide evaluates a reservation without making one: docs/protocol.md#dry-run-and-decide.
// Budget and tenant conditions are DENY results.
func (l *Ledger) Decide(ctx context.Context, tenant string, req *cyclesv1.DecideRequest) (*cyclesv1.DecideResponse, error) {
	d, err := l.newCreating(tenant, req)
	if err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	ks := decideKeys{t.Prefix(), t.Record(), t.Budgets(), t.Idempotency("decide", req.GetIdempotencyKey()), t.Events(),
		d.budgetKeys}
	snap, err := runFlat(ctx, l, scriptDecide, replyDecide, ks, decideArgs{
		d.unit, req.GetEstimate().GetAmount(), req.GetIdempotencyKey(), d.hash,
		d.Path, d.affected, d.subject, d.action, l.eventContext(ctx),
		d.kind, d.risk, d.runID, d.policyKeys})
	if err != nil {
		return nil, l.refused(ctx, "decide", err)
	}
	caps, dd, err := capsAndDenial(snap.Caps, snap.DenyDetail)
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
	if snap.Replay {
		l.replayed(ctx, "decide")
		return resp, nil
	}
	l.m.decisions.Add(ctx, 1, attribute.String("operation", "decide"), attribute.String("decision", snap.Decision))
	if snap.Denied != "" {
		l.m.denied.Add(ctx, 1, attribute.String("operation", "decide"), attribute.String("reason", snap.Denied))
	}
	return resp, nil
}
