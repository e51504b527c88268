package ledger

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/scopefilter"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// Commit settles a reservation of the effective tenant with its actual cost:
// docs/protocol.md#commit. Ids of other tenants are answered by the handler's
// owner check (ids.go) before this is called.
func (l *Ledger) Commit(ctx context.Context, tenant string, req *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
	hash, meta, err := hashAndMetadata(req)
	if err != nil {
		return nil, err
	}
	metrics, err := jsonOf(req.GetMetrics())
	if err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	rid := req.GetReservationId()
	ks := commitKeys{t.Prefix(), t.Record(), t.Reservation(rid), t.Deadlines(), t.Events()}
	args := commitArgs{ID: rid, Unit: scope.UnitKey(req.GetActual().GetUnit()), Amount: req.GetActual().GetAmount(),
		IdempotencyKey: req.GetIdempotencyKey(), PayloadHash: hash, Metrics: metrics, Metadata: meta,
		EventCtx: l.eventContext(ctx), Archive: l.archive, ScopeFilter: scopefilter.ScriptArg(ctx)}
	snap, err := runSettle(ctx, l, scriptCommit, replyCommit, tenant, rid, ks, args)
	if err != nil {
		return nil, l.refused(ctx, "commit", err)
	}
	unit := scope.ParseUnit(snap.Unit)
	resp := &cyclesv1.CommitReservationResponse{
		Status:       cyclesv1.ReservationStatus_RESERVATION_STATUS_COMMITTED,
		Balances:     balances(unit, snap.Balances),
		DebtIncurred: int64(snap.DebtIncurred),
		Charged:      optAmount(unit, snap.Charged),
		Released:     optAmount(unit, snap.Released),
	}
	if snap.Replay {
		l.replayed(ctx, "commit")
		return resp, nil
	}
	l.m.committed.Add(ctx, 1)
	if snap.Overage > 0 {
		l.m.overages.Add(ctx, 1, attribute.String("unit", snap.Unit))
	}
	l.incurred(ctx, snap.Debt, snap.Unit)
	return resp, nil
}

// Release returns a reservation's whole hold: docs/protocol.md#release.
func (l *Ledger) Release(ctx context.Context, tenant string, req *cyclesv1.ReleaseReservationRequest) (*cyclesv1.ReleaseReservationResponse, error) {
	hash, err := idempotency.PayloadHash(req)
	if err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	rid := req.GetReservationId()
	audit := ""
	if eventctx.AuditFrom(ctx) != nil {
		// An audited release (the admin key acting for the tenant): the
		// script appends the audit entry with the release it records.
		audit = eventctx.Arg(ctx, l.retention)
	}
	args := releaseArgs{ID: rid, IdempotencyKey: req.GetIdempotencyKey(), PayloadHash: hash, Reason: req.GetReason(),
		AuditCtx: audit, Archive: l.archive, ScopeFilter: scopefilter.ScriptArg(ctx)}
	ks := releaseKeys{t.Prefix(), t.Record(), t.Reservation(rid), t.Deadlines()}
	snap, err := runSettle(ctx, l, scriptRelease, replyRelease, tenant, rid, ks, args)
	if err != nil {
		return nil, l.refused(ctx, "release", err)
	}
	unit := scope.ParseUnit(snap.Unit)
	resp := &cyclesv1.ReleaseReservationResponse{
		Status:   cyclesv1.ReservationStatus_RESERVATION_STATUS_RELEASED,
		Balances: balances(unit, snap.Balances),
		Released: optAmount(unit, snap.Released),
	}
	if snap.Replay {
		l.replayed(ctx, "release")
		return resp, nil
	}
	l.m.released.Add(ctx, 1, attribute.String("reason", "client"))
	return resp, nil
}

// Extend moves a reservation's expiry forward: docs/protocol.md#extend.
func (l *Ledger) Extend(ctx context.Context, tenant string, req *cyclesv1.ExtendReservationRequest) (*cyclesv1.ExtendReservationResponse, error) {
	hash, meta, err := hashAndMetadata(req)
	if err != nil {
		return nil, err
	}
	t := keys.Tenant(tenant)
	rid := req.GetReservationId()
	snap, err := runFlat(ctx, l, scriptExtend, replyExtend,
		extendKeys{t.Prefix(), t.Record(), t.Reservation(rid), t.Deadlines(), t.Expires(),
			t.Idempotency("extend:"+rid, req.GetIdempotencyKey())},
		extendArgs{rid, req.GetExtendByMs(), req.GetIdempotencyKey(), hash, meta, scopefilter.ScriptArg(ctx)})
	if err != nil {
		return nil, l.refused(ctx, "extend", err)
	}
	resp := &cyclesv1.ExtendReservationResponse{
		Status:         cyclesv1.ReservationStatus_RESERVATION_STATUS_ACTIVE,
		ExpiresAtMs:    int64(snap.ExpiresAtMs),
		Balances:       balances(scope.ParseUnit(snap.Unit), snap.Balances),
		ExtensionCount: int32(snap.ExtensionCount),
	}
	if snap.RemTTL != nil {
		resp.RemainingTtlMs = int64(*snap.RemTTL)
	}
	if snap.Replay {
		l.replayed(ctx, "extend")
		return resp, nil
	}
	l.m.extended.Add(ctx, 1)
	return resp, nil
}

// CreateEvent debits an actual cost directly: docs/protocol.md#direct-debits-createevent.
func (l *Ledger) CreateEvent(ctx context.Context, tenant string, req *cyclesv1.CreateEventRequest) (*cyclesv1.CreateEventResponse, error) {
	d, err := l.newCreating(tenant, req)
	if err != nil {
		return nil, err
	}
	metrics, err := jsonOf(req.GetMetrics())
	if err != nil {
		return nil, err
	}
	clientTime := ""
	if req.ClientTimeMs != nil {
		clientTime = strconv.FormatInt(req.GetClientTimeMs(), 10)
	}
	eid := l.newID()
	t := keys.Tenant(tenant)
	ks := eventKeys{t.Prefix(), t.Record(), t.Budgets(), t.Event(eid),
		t.Idempotency("event", req.GetIdempotencyKey()), t.Events(), d.budgetKeys}
	snap, err := runFlat(ctx, l, scriptEvent, replyEvent, ks, eventArgs{
		eid, d.unit, req.GetActual().GetAmount(), d.overage,
		req.GetIdempotencyKey(), d.hash, d.Path, d.affected, d.subject, d.action, metrics, d.metadata, clientTime,
		l.eventContext(ctx)})
	if err != nil {
		return nil, l.refused(ctx, "event", err)
	}
	unit := scope.ParseUnit(snap.Unit)
	resp := &cyclesv1.CreateEventResponse{
		Status:       cyclesv1.EventStatus_EVENT_STATUS_APPLIED,
		EventId:      snap.EventID,
		Balances:     balances(unit, snap.Balances),
		DebtIncurred: int64(snap.DebtIncurred),
		Charged:      optAmount(unit, snap.Charged),
	}
	if snap.Replay {
		l.replayed(ctx, "event")
		return resp, nil
	}
	l.m.eventsMade.Add(ctx, 1)
	l.incurred(ctx, snap.Debt, snap.Unit)
	return resp, nil
}

// ReleaseForTenantClose releases up to batch ACTIVE reservations of a CLOSED
// tenant through the normal release arithmetic (docs/protocol.md#tenants-and-api-keys),
// bypassing only the TENANT_CLOSED guard. more reports whether ACTIVE
// reservations remain; the admin plane calls it until more is false. A
// reservation that cannot be released (corrupt record, overflow) is
// quarantined instead, so the loop always terminates. The tenant record must
// be CLOSED (else INVALID_STATE).
func (l *Ledger) ReleaseForTenantClose(ctx context.Context, tenant string, batch int) (released int, more bool, err error) {
	defaults.Set(&batch, 100)
	defaults.Cap(&batch, 1000)
	t := keys.Tenant(tenant)
	var out struct {
		Released    int `json:"released"`
		Quarantined int `json:"quarantined"`
		Remaining   int `json:"remaining"`
	}
	err = scriptReleaseForClose.RunInto(ctx, l.exec, &out,
		releaseForCloseKeys{t.Prefix(), t.Record(), t.Deadlines(), t.Events()},
		releaseForCloseArgs{batch, l.eventContext(ctx), l.archive})
	if err != nil {
		return 0, false, l.refused(ctx, "release_for_close", err)
	}
	if out.Released > 0 {
		l.m.released.Add(ctx, int64(out.Released), attribute.String("reason", "tenant_closed"))
	}
	return out.Released, out.Remaining > 0, nil
}

// withMetadata is a request carrying client metadata (commit, extend).
type withMetadata interface {
	proto.Message
	GetMetadata() *structpb.Struct
}

// hashAndMetadata is req's payload hash (the idempotency check) and its
// metadata as the script's JSON argument ("" when absent).
func hashAndMetadata(req withMetadata) (hash, meta string, err error) {
	if hash, err = idempotency.PayloadHash(req); err != nil {
		return "", "", err
	}
	meta, err = jsonOf(req.GetMetadata())
	return hash, meta, err
}

// settleArgs are the arguments of a script that settles a reservation
// (commit, release): a second run carries the archived record's pairs.
type settleArgs[A any] interface {
	withArchived(pairs []string) A
}

func (a commitArgs) withArchived(pairs []string) commitArgs {
	a.Archived = pairs
	return a
}

func (a releaseArgs) withArchived(pairs []string) releaseArgs {
	a.Archived = pairs
	return a
}

// runSettle runs a commit or release script, and once more with the archived
// record's pairs when the first run found no record and the reservation is
// in the archive (archivedPairs).
func runSettle[K any, A settleArgs[A], R any](ctx context.Context, l *Ledger, sc *script.Script[K, A],
	layout *script.ReplyLayout[R], tenant, rid string, ks K, args A) (*R, error) {
	snap, err := runFlat(ctx, l, sc, layout, ks, args)
	more, ok, aerr := l.archivedPairs(ctx, tenant, rid, err)
	if aerr != nil {
		return nil, aerr
	}
	if ok {
		return runFlat(ctx, l, sc, layout, ks, args.withArchived(more))
	}
	return snap, err
}

// archivedPairs: when a commit or release found no record (err NOT_FOUND)
// and the reservation is in the archive (past the hot window), the
// archived record's field/value pairs, for the script's second run, which
// answers a replay from them byte for byte as from the hash, or refuses
// as it would have, writing nothing (lua/ledger/commit.lua, release.lua).
func (l *Ledger) archivedPairs(ctx context.Context, tenant, rid string, err error) ([]string, bool, error) {
	if l.archived == nil || !apierr.HasCode(err, apierr.NotFound) {
		return nil, false, nil
	}
	f, ok, aerr := l.archived(ctx, tenant, rid)
	if aerr != nil {
		return nil, false, fmt.Errorf("reservation %s from the archive: %w", rid, aerr)
	}
	if !ok {
		return nil, false, nil
	}
	names := make([]string, 0, len(f))
	for k := range f {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]string, 0, 2*len(f))
	for _, k := range names {
		out = append(out, k, f[k])
	}
	return out, true, nil
}
