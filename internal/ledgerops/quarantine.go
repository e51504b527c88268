package ledgerops

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	pagecursor "github.com/cyclesgo/cycles-go/internal/cursor"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// Bounds of ListQuarantined.
const (
	DefaultListPage = 100
	MaxListPage     = 500
	// maxTenantsPerPage bounds the tenants one all-tenant page visits, so a
	// page over many clean tenants still returns quickly (with a token).
	maxTenantsPerPage = 100
)

// listToken is the opaque page token of ListQuarantined.
type listToken struct {
	Tenant string `json:"t"`
	Member string `json:"m,omitempty"`
	Score  string `json:"s,omitempty"`
}

type holdRow struct {
	Scope    string `json:"scope"`
	Unit     string `json:"unit"`
	Amount   string `json:"amount"`
	Reserved string `json:"reserved"`
}

type quarantineRow struct {
	ID     string                   `json:"id"`
	Reason string                   `json:"reason"`
	At     string                   `json:"at"`
	Fields luaMap[string]           `json:"fields"`
	Holds  script.LuaArray[holdRow] `json:"holds"`
}

func (q quarantineRow) proto(tenant string) *cyclesv1.QuarantinedReservation {
	at, _ := strconv.ParseInt(q.At, 10, 64)
	out := &cyclesv1.QuarantinedReservation{TenantId: tenant, ReservationId: q.ID, Reason: q.Reason,
		QuarantinedAtMs: at, Fields: q.Fields}
	for _, h := range q.Holds {
		amt, _ := strconv.ParseInt(h.Amount, 10, 64)
		out.Holds = append(out.Holds, &cyclesv1.Hold{ScopePath: h.Scope, Unit: h.Unit, Amount: amt, BudgetReserved: h.Reserved})
	}
	return out
}

// ListQuarantined returns one page of quarantined reservations of one tenant
// or (tenant_id empty) of every tenant in registry order.
func (s *Service) ListQuarantined(ctx context.Context, req *cyclesv1.ListQuarantinedRequest) (*cyclesv1.ListQuarantinedResponse, error) {
	size := int(req.GetPageSize())
	defaults.Set(&size, DefaultListPage)
	defaults.Cap(&size, MaxListPage)
	var tok listToken
	if req.GetPageToken() != "" {
		if err := pagecursor.DecodeJSON("page_token", req.GetPageToken(), &tok); err != nil {
			return nil, err
		}
		if req.GetTenantId() != "" && tok.Tenant != req.GetTenantId() {
			return nil, apierr.Invalid("page_token", "belongs to another listing")
		}
	}
	resp := &cyclesv1.ListQuarantinedResponse{}
	// page lists tenant from cursor c until the response is full; it returns
	// the cursor to continue from, or nil when the tenant is done.
	page := func(tenant string, c cursor) (*cursor, error) {
		for {
			var out zpage[quarantineRow]
			n := size - len(resp.Reservations)
			if err := scriptQuarantineList.RunInto(ctx, s.exec, &out, prefixKeys{keys.Tenant(tenant).Prefix()},
				zpageArgs{c.Member, c.Score, n}); err != nil {
				return nil, fmt.Errorf("list quarantined of %s: %w", tenant, err)
			}
			for _, r := range out.Rows {
				resp.Reservations = append(resp.Reservations, r.proto(tenant))
			}
			if out.Done || out.Next == c {
				return nil, nil
			}
			c = out.Next
			if len(resp.Reservations) >= size {
				return &c, nil
			}
		}
	}

	if req.GetTenantId() != "" {
		next, err := page(req.GetTenantId(), cursor{Member: tok.Member, Score: tok.Score})
		if err != nil {
			return nil, err
		}
		if next != nil {
			resp.NextPageToken = pagecursor.EncodeJSON(listToken{Tenant: req.GetTenantId(), Member: next.Member, Score: next.Score})
		}
		return resp, nil
	}

	// All tenants: finish the token's tenant, then walk the registry after it.
	visited := 0
	var walkErr error
	visit := func(tenant string, c cursor) bool {
		visited++
		next, err := page(tenant, c)
		if err != nil {
			walkErr = err
			return false
		}
		switch {
		case next != nil:
			resp.NextPageToken = pagecursor.EncodeJSON(listToken{Tenant: tenant, Member: next.Member, Score: next.Score})
			return false
		case len(resp.Reservations) >= size || visited >= maxTenantsPerPage:
			// Continue after this tenant: a token with no cursor past it.
			resp.NextPageToken = pagecursor.EncodeJSON(listToken{Tenant: tenant + "\x00"})
			return false
		}
		return true
	}
	after := ""
	if tok.Tenant != "" {
		if t, ok := strings.CutSuffix(tok.Tenant, "\x00"); ok {
			after = t
		} else {
			if !visit(tok.Tenant, cursor{Member: tok.Member, Score: tok.Score}) {
				return resp, walkErr
			}
			after = tok.Tenant
		}
	}
	err := s.walkTenants(ctx, after, func(t string) bool { return visit(t, cursor{}) })
	if walkErr != nil {
		return nil, walkErr
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

type resolveResult struct {
	Replay bool `json:"replay"`
	Resp   struct {
		Outcome string        `json:"outcome"`
		Row     quarantineRow `json:"row"`
		Budgets script.LuaArray[struct {
			Scope string         `json:"scope"`
			Unit  string         `json:"unit"`
			F     luaMap[string] `json:"f"`
		}] `json:"budgets"`
	} `json:"resp"`
}

// Resolve settles one quarantined reservation (see lua/ops/quarantine_resolve.lua).
func (s *Service) Resolve(ctx context.Context, req *cyclesv1.ResolveQuarantinedRequest) (*cyclesv1.ResolveQuarantinedResponse, error) {
	req, err := canonicalResolve(req)
	if err != nil {
		return nil, err
	}
	hash, err := idempotency.PayloadHash(req)
	if err != nil {
		return nil, err
	}
	var outcome string
	args := map[string]any{}
	switch o := req.GetOutcome().(type) {
	case *cyclesv1.ResolveQuarantinedRequest_Release:
		outcome = "release"
		amounts := []map[string]string{}
		for _, a := range o.Release.GetAmounts() {
			amounts = append(amounts, map[string]string{"scope": a.GetScopePath(), "amount": strconv.FormatInt(a.GetAmount(), 10)})
		}
		args["amounts"] = amounts
	case *cyclesv1.ResolveQuarantinedRequest_ExpireWithoutRefund:
		outcome = "expire"
	case *cyclesv1.ResolveQuarantinedRequest_Requeue:
		outcome = "requeue"
		q := o.Requeue
		// Amounts and times travel as decimal strings (exact int64).
		if q.Estimate != nil {
			args["estimate"] = strconv.FormatInt(q.GetEstimate(), 10)
		}
		if u := q.GetUnit(); u != cyclesv1.Unit_UNIT_UNSPECIFIED {
			args["unit"] = scope.UnitKey(u)
		}
		if len(q.GetBudgetedScopes()) > 0 {
			args["budgeted"] = q.GetBudgetedScopes()
		}
		if q.ExpiresAtMs != nil {
			args["expires_at"] = strconv.FormatInt(q.GetExpiresAtMs(), 10)
		}
		if q.GraceMs != nil {
			args["grace_ms"] = strconv.FormatInt(q.GetGraceMs(), 10)
		}
	default:
		return nil, apierr.Invalid("outcome", "choose release, expire_without_refund or requeue")
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("encode resolution: %w", err)
	}
	t := keys.Tenant(req.GetTenantId())
	var out resolveResult
	if err := scriptQuarantineResolve.RunInto(ctx, s.exec, &out,
		settleKeys{t.Prefix(), t.Idempotency("resolve", req.GetIdempotencyKey()), t.Events()},
		resolveArgs{req.GetReservationId(), outcome, string(raw), req.GetReason(), hash, ReplayWindow.Milliseconds(),
			s.eventContext(ctx), s.archive()}); err != nil {
		return nil, err
	}
	if !out.Replay {
		s.resolved.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", out.Resp.Outcome)))
	}
	resp := &cyclesv1.ResolveQuarantinedResponse{Outcome: out.Resp.Outcome, Replay: out.Replay,
		Reservation: out.Resp.Row.proto(req.GetTenantId())}
	for _, b := range out.Resp.Budgets {
		resp.Budgets = append(resp.Budgets, &cyclesv1.BudgetFields{ScopePath: b.Scope, Unit: b.Unit, Fields: b.F})
	}
	return resp, nil
}

// canonicalResolve returns a copy of req with every scope path canonical (as
// budgets and records store them), so "tenant:a/agent:Bot" and
// "tenant:a/agent:bot" are the same request.
func canonicalResolve(req *cyclesv1.ResolveQuarantinedRequest) (*cyclesv1.ResolveQuarantinedRequest, error) {
	c := proto.Clone(req).(*cyclesv1.ResolveQuarantinedRequest)
	canon := func(field string, p *string) error {
		v, err := scope.Canonical(c.GetTenantId(), *p)
		if err != nil {
			return apierr.Invalid(field, "%v", err)
		}
		*p = v
		return nil
	}
	for i, a := range c.GetRelease().GetAmounts() {
		if err := canon(fmt.Sprintf("release.amounts[%d].scope_path", i), &a.ScopePath); err != nil {
			return nil, err
		}
	}
	if q := c.GetRequeue(); q != nil {
		for i := range q.BudgetedScopes {
			if err := canon(fmt.Sprintf("requeue.budgeted_scopes[%d]", i), &q.BudgetedScopes[i]); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}
