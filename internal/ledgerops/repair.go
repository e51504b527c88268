package ledgerops

import (
	"context"
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/idempotency"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// repairPlan is ARGV[1] of lua/ops/repair.lua: the candidates an audit found,
// each re-checked by the script before it is touched.
type repairPlan struct {
	Scope      string   `json:"scope"`
	Orphans    []string `json:"orphans"`
	Finalized  []string `json:"finalized"`
	Unindexed  []string `json:"unindexed"`
	Rescore    []string `json:"rescore"`
	QUnindexed []string `json:"q_unindexed"`
	QStale     []string `json:"q_stale"`
	NoTTL      []string `json:"no_ttl"`
	Budgets    []string `json:"budgets"`
}

type repairChange struct {
	Kind   string         `json:"kind"`
	Action string         `json:"action"`
	ID     string         `json:"id"`
	Scope  string         `json:"scope"`
	Unit   string         `json:"unit"`
	Before luaMap[string] `json:"before"`
	After  luaMap[string] `json:"after"`
}

// skipped is a budget the repair script left alone, and why.
type skipped struct {
	Kind  string           `json:"kind"`
	Scope string           `json:"scope"`
	Unit  string           `json:"unit"`
	Msg   string           `json:"msg"`
	Ev    luaMap[jsonText] `json:"ev"`
}

type repairResult struct {
	Replay bool `json:"replay"`
	Resp   struct {
		Changes script.LuaArray[repairChange] `json:"changes"`
		Skipped script.LuaArray[skipped]      `json:"skipped"`
	} `json:"resp"`
}

// Repair audits the tenant, then runs the repair script on what the audit
// found: a dry run (req.Apply false, the default) reports the changes and
// writes nothing; an apply writes them in one script, idempotently by key.
func (s *Service) Repair(ctx context.Context, req *cyclesv1.RepairTenantRequest) (*cyclesv1.RepairTenantResponse, error) {
	if req.GetApply() && req.GetIdempotencyKey() == "" {
		return nil, apierr.Invalid("idempotency_key", "is required when apply is true")
	}
	hash, err := idempotency.PayloadHash(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	tenant := req.GetTenantId()
	r, err := s.audit(ctx, tenant)
	if err != nil {
		return nil, err
	}
	plan := planOf(r)
	plan.Scope = "tenant:" + tenant
	raw, err := json.Marshal(plan)
	if err != nil {
		return nil, fmt.Errorf("encode repair plan: %w", err)
	}
	t := keys.Tenant(tenant)
	idem := t.Idempotency("repair", "dry-run")
	if req.GetApply() {
		idem = t.Idempotency("repair", req.GetIdempotencyKey())
	}
	var out repairResult
	if err := scriptRepair.RunInto(ctx, s.exec, &out, settleKeys{t.Prefix(), idem, t.Events()},
		repairArgs{string(raw), req.GetApply(), hash, ReplayWindow.Milliseconds(), s.eventContext(ctx), s.opts.HoldsLimit}); err != nil {
		return nil, fmt.Errorf("repair %s: %w", tenant, err)
	}
	resp := &cyclesv1.RepairTenantResponse{Applied: req.GetApply(), Replay: out.Replay}
	for _, c := range out.Resp.Changes {
		resp.Changes = append(resp.Changes, &cyclesv1.RepairChange{Kind: c.Kind, Action: c.Action, ReservationId: c.ID,
			ScopePath: c.Scope, Unit: c.Unit, Before: c.Before, After: c.After})
		if req.GetApply() && !out.Replay {
			s.repairs.Add(ctx, 1, metric.WithAttributes(attribute.String("kind", c.Kind)))
		}
	}
	resp.Unrepaired = unrepaired(r, resp.Changes, out.Resp.Skipped)
	return resp, nil
}

// planOf collects the repairable candidates of an audit.
func planOf(r *report) repairPlan {
	var p repairPlan
	budgets := map[string]bool{}
	for _, d := range r.found {
		switch d.Kind {
		case KindIndexOrphan:
			p.Orphans = append(p.Orphans, d.ReservationId)
		case KindIndexFinalized:
			p.Finalized = append(p.Finalized, d.ReservationId)
		case KindActiveNotIndexed:
			if d.Repairable {
				p.Unindexed = append(p.Unindexed, d.ReservationId)
			}
		case KindDeadlineScoreMismatch:
			p.Rescore = append(p.Rescore, d.ReservationId)
		case KindQuarantineNotIndexed:
			p.QUnindexed = append(p.QUnindexed, d.ReservationId)
		case KindQuarantineStale:
			p.QStale = append(p.QStale, d.ReservationId)
		case KindTerminalNoTTL:
			p.NoTTL = append(p.NoTTL, d.ReservationId)
		case KindReservedMismatch, KindBalanceIdentity, KindBudgetFieldInvalid:
			m := keys.BudgetMember(d.ScopePath, d.Unit)
			if d.Unit != "" && !budgets[m] {
				budgets[m] = true
				p.Budgets = append(p.Budgets, m)
			}
		}
	}
	return p
}

// unrepaired are the audit's discrepancies no change covers, plus what the
// script refused to touch. A budget change covers every budget-level
// discrepancy of that budget (one HSET restores reserved and the identity).
func unrepaired(r *report, changes []*cyclesv1.RepairChange, skips []skipped) []*cyclesv1.AuditDiscrepancy {
	fixedRecord := map[string]bool{}
	fixedBudget := map[string]bool{}
	for _, c := range changes {
		if c.GetReservationId() != "" {
			fixedRecord[c.GetKind()+"|"+c.GetReservationId()] = true
		} else {
			fixedBudget[keys.BudgetMember(c.GetScopePath(), c.GetUnit())] = true
		}
	}
	skippedBudget := map[string]skipped{}
	for _, f := range skips {
		skippedBudget[keys.BudgetMember(f.Scope, f.Unit)] = f
	}
	var out []*cyclesv1.AuditDiscrepancy
	for _, d := range r.found {
		if d.GetReservationId() != "" && fixedRecord[d.GetKind()+"|"+d.GetReservationId()] {
			continue
		}
		if d.GetReservationId() == "" && d.GetUnit() != "" && fixedBudget[keys.BudgetMember(d.GetScopePath(), d.GetUnit())] {
			continue
		}
		c := cloneDiscrepancy(d)
		if f, ok := skippedBudget[keys.BudgetMember(d.GetScopePath(), d.GetUnit())]; ok && d.GetReservationId() == "" {
			c.Repairable = false
			c.Message += " (not repaired: " + f.Msg + ")"
		}
		out = append(out, c)
	}
	return out
}

func cloneDiscrepancy(d *cyclesv1.AuditDiscrepancy) *cyclesv1.AuditDiscrepancy {
	return &cyclesv1.AuditDiscrepancy{Kind: d.Kind, ReservationId: d.ReservationId, ScopePath: d.ScopePath, Unit: d.Unit,
		Message: d.Message, Evidence: d.Evidence, Repairable: d.Repairable}
}
