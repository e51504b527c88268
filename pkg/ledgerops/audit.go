package ledgerops

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/pkg/keys"
)

// Discrepancy kinds (docs/operations-runbook.md explains each and its fix).
const (
	KindReservedMismatch      = "RESERVED_MISMATCH"
	KindBalanceIdentity       = "BALANCE_IDENTITY"
	KindBudgetFieldInvalid    = "BUDGET_FIELD_INVALID"
	KindBudgetMissing         = "BUDGET_MISSING"
	KindIndexOrphan           = "INDEX_ORPHAN"
	KindIndexFinalized        = "INDEX_FINALIZED"
	KindActiveNotIndexed      = "ACTIVE_NOT_INDEXED"
	KindDeadlineScoreMismatch = "DEADLINE_SCORE_MISMATCH"
	KindInvalidRecord         = "INVALID_RECORD"
	KindQuarantined           = "QUARANTINED"
	KindQuarantineNotIndexed  = "QUARANTINE_NOT_INDEXED"
	KindQuarantineStale       = "QUARANTINE_STALE"
	KindTerminalNoTTL         = "TERMINAL_NO_TTL"
	KindHoldsNotChecked       = "HOLDS_NOT_CHECKED"
)

// Kinds lists every discrepancy kind (the label values of cycles_audit_discrepancies).
var Kinds = []string{
	KindReservedMismatch, KindBalanceIdentity, KindBudgetFieldInvalid, KindBudgetMissing,
	KindIndexOrphan, KindIndexFinalized, KindActiveNotIndexed, KindDeadlineScoreMismatch,
	KindInvalidRecord, KindQuarantined, KindQuarantineNotIndexed, KindQuarantineStale,
	KindTerminalNoTTL, KindHoldsNotChecked,
}

// budgetFields are the ledger amounts of a budget hash, in the order checked.
var budgetFields = []string{"allocated", "remaining", "reserved", "spent", "debt"}

// report is the full result of one audit.
type report struct {
	found []*cyclesv1.AuditDiscrepancy
	stats *cyclesv1.AuditStats
	// extra are ACTIVE ids outside both indexes (the holds scripts read them too).
	extra []string
}

func (r *report) add(d *cyclesv1.AuditDiscrepancy) { r.found = append(r.found, d) }

func (r *report) addFinding(f finding) {
	r.add(&cyclesv1.AuditDiscrepancy{Kind: f.Kind, ReservationId: f.ID, ScopePath: f.Scope, Unit: f.Unit,
		Message: f.Msg, Evidence: evidence(f.Ev), Repairable: f.Fix})
}

// Audit checks one tenant's ledger and returns at most max discrepancies.
func (s *Service) Audit(ctx context.Context, req *cyclesv1.AuditTenantRequest) (*cyclesv1.AuditTenantResponse, error) {
	ctx, cancel := s.opContext(ctx)
	defer cancel()
	r, err := s.audit(ctx, req.GetTenantId())
	if err != nil {
		return nil, err
	}
	max := int(req.GetMaxDiscrepancies())
	if max <= 0 {
		max = 1000
	}
	resp := &cyclesv1.AuditTenantResponse{TenantId: req.GetTenantId(), Stats: r.stats, Discrepancies: r.found}
	if len(r.found) > max {
		resp.Discrepancies, resp.Truncated = r.found[:max], true
	}
	return resp, nil
}

// audit runs every check on tenant in bounded script calls.
func (s *Service) audit(ctx context.Context, tenant string) (*report, error) {
	s.audits.Add(ctx, 1)
	prefix := keys.Tenant(tenant).Prefix()
	r := &report{stats: &cyclesv1.AuditStats{}}
	seen := map[string]bool{} // kind|id: a restarted page may repeat rows

	// Records, through the created index.
	var cur cursor
	for {
		var page struct {
			Rows        luaArrayOf[finding] `json:"rows"`
			Next        cursor              `json:"next"`
			Done        bool                `json:"done"`
			Records     int64               `json:"records"`
			Active      int64               `json:"active"`
			Quarantined int64               `json:"quarantined"`
		}
		if err := s.runPage(ctx, &page, "ops/audit_records", prefix, cur.Member, cur.Score, s.opts.PageSize); err != nil {
			return nil, fmt.Errorf("audit records of %s: %w", tenant, err)
		}
		r.stats.Records += page.Records
		r.stats.Active += page.Active
		r.stats.Quarantined += page.Quarantined
		for _, f := range page.Rows {
			if seen[f.Kind+"|"+f.ID] {
				continue
			}
			seen[f.Kind+"|"+f.ID] = true
			r.addFinding(f)
			if f.Kind == KindActiveNotIndexed || f.Kind == KindQuarantineNotIndexed {
				r.extra = append(r.extra, f.ID)
			}
		}
		if page.Done || page.Next == cur {
			break
		}
		cur = page.Next
	}

	// Both indexes, entry by entry.
	for _, which := range []string{"deadline", "quarantine"} {
		cur = cursor{}
		for {
			var page struct {
				Rows    luaArrayOf[finding] `json:"rows"`
				Next    cursor              `json:"next"`
				Done    bool                `json:"done"`
				Entries int64               `json:"entries"`
			}
			if err := s.runPage(ctx, &page, "ops/audit_index", prefix, which, cur.Member, cur.Score, s.opts.PageSize); err != nil {
				return nil, fmt.Errorf("audit %s index of %s: %w", which, tenant, err)
			}
			if which == "deadline" {
				r.stats.DeadlineEntries += page.Entries
			}
			for _, f := range page.Rows {
				if seen[f.Kind+"|"+f.ID] {
					continue
				}
				seen[f.Kind+"|"+f.ID] = true
				r.addFinding(f)
			}
			if page.Done || page.Next == cur {
				break
			}
			cur = page.Next
		}
	}

	// Budgets: fields and the balance identity, then reserved against holds.
	reserved := map[string]*big.Int{} // member -> stored reserved (valid ones)
	identityBroken := map[string]*cyclesv1.AuditDiscrepancy{}
	after := ""
	for {
		var page struct {
			Rows luaArrayOf[struct {
				M         string         `json:"m"`
				Exists    bool           `json:"exists"`
				WrongType bool           `json:"wrong_type"`
				F         luaMap[string] `json:"f"`
			}] `json:"rows"`
			Done bool `json:"done"`
		}
		if err := s.runPage(ctx, &page, "ops/audit_budgets", prefix, after, s.opts.PageSize); err != nil {
			return nil, fmt.Errorf("audit budgets of %s: %w", tenant, err)
		}
		for _, b := range page.Rows {
			r.stats.Budgets++
			scope, unit := splitMember(b.M)
			switch {
			case !b.Exists:
				r.add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetMissing, ScopePath: scope, Unit: unit,
					Message: "the budgets index names a budget hash that does not exist"})
				continue
			case b.WrongType:
				r.add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetFieldInvalid, ScopePath: scope, Unit: unit,
					Message: "budget key is not a hash"})
				continue
			}
			v := map[string]*big.Int{}
			ev := map[string]string{}
			for _, f := range budgetFields {
				raw, ok := b.F[f]
				ev[f] = raw
				n, valid := parseInt64(raw)
				if !ok || !valid {
					what := "missing"
					if ok {
						what = "not an int64"
					}
					r.add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetFieldInvalid, ScopePath: scope, Unit: unit,
						Message: "budget field " + f + " is " + what, Evidence: map[string]string{"field": f, "value": raw},
						Repairable: f == "reserved" || f == "remaining"})
					continue
				}
				v[f] = n
			}
			if len(v) < len(budgetFields) {
				continue
			}
			reserved[b.M] = v["reserved"]
			want := new(big.Int).Sub(v["allocated"], v["spent"])
			want.Sub(want, v["reserved"]).Sub(want, v["debt"])
			if want.Cmp(v["remaining"]) != 0 {
				ev["expected_remaining"] = want.String()
				d := &cyclesv1.AuditDiscrepancy{Kind: KindBalanceIdentity, ScopePath: scope, Unit: unit,
					Message: "remaining != allocated - spent - reserved - debt", Evidence: ev}
				r.add(d)
				identityBroken[b.M] = d
			}
		}
		if page.Done || len(page.Rows) == 0 {
			break
		}
		after = page.Rows[len(page.Rows)-1].M
	}

	h, err := s.holds(ctx, prefix, r.extra, nil)
	if err != nil {
		return nil, fmt.Errorf("sum holds of %s: %w", tenant, err)
	}
	if h.OverLimit {
		r.add(&cyclesv1.AuditDiscrepancy{Kind: KindHoldsNotChecked,
			Message:  "more ACTIVE reservations than one script reads; reserved was not checked against holds",
			Evidence: map[string]string{"limit": fmt.Sprint(s.opts.HoldsLimit)}})
		return r, nil
	}
	var suspects []string
	for m, res := range reserved {
		if h.AllUncertain || h.Uncertain[m] {
			continue
		}
		sum, _ := parseInt64(h.Sums[m])
		if h.Sums[m] == "" {
			sum = new(big.Int)
		}
		if sum.Cmp(res) != 0 {
			suspects = append(suspects, m)
		}
	}
	if len(suspects) == 0 {
		return r, nil
	}
	// Confirm inside one script: reserved and holds from one instant.
	sort.Strings(suspects)
	h, err = s.holds(ctx, prefix, r.extra, suspects)
	if err != nil {
		return nil, fmt.Errorf("confirm holds of %s: %w", tenant, err)
	}
	if h.OverLimit || h.AllUncertain {
		return r, nil
	}
	for _, m := range suspects {
		sum := h.Sums[m]
		if sum == "" {
			sum = "0"
		}
		res, ok := h.Reserved[m]
		rn, valid := parseInt64(res)
		sn, _ := parseInt64(sum)
		if !ok || !valid || h.Uncertain[m] || rn.Cmp(sn) == 0 {
			continue
		}
		scope, unit := splitMember(m)
		ev := map[string]string{"reserved": res, "sum_of_active_holds": sum}
		repairable := true
		if q := h.Quarantined[m]; q != "" {
			ev["held_by_quarantined"] = q
			repairable = false
		}
		r.add(&cyclesv1.AuditDiscrepancy{Kind: KindReservedMismatch, ScopePath: scope, Unit: unit,
			Message: "reserved != sum of the estimates of the ACTIVE reservations holding it", Evidence: ev, Repairable: repairable})
		if d := identityBroken[m]; d != nil {
			d.Repairable = repairable
		}
	}
	return r, nil
}

// holdsResult is the result of lua/ops/holds.lua.
type holdsResult struct {
	OverLimit    bool           `json:"over_limit"`
	Sums         luaMap[string] `json:"sums"`
	Uncertain    luaMap[bool]   `json:"uncertain"`
	Quarantined  luaMap[string] `json:"quarantined"`
	AllUncertain bool           `json:"all_uncertain"`
	Active       int64          `json:"active"`
	Reserved     luaMap[string] `json:"reserved"`
}

func (s *Service) holds(ctx context.Context, prefix string, extra, members []string) (holdsResult, error) {
	var h holdsResult
	x, _ := json.Marshal(nonNil(extra))
	m, _ := json.Marshal(nonNil(members))
	err := s.exec.RunInto(ctx, &h, "ops/holds", []string{prefix}, s.opts.HoldsLimit, string(x), string(m))
	return h, err
}

func (s *Service) runPage(ctx context.Context, out any, name, prefix string, args ...any) error {
	return s.exec.RunInto(ctx, out, name, []string{prefix}, args...)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// splitMember splits a budgets index member "<scope_path>|<UNIT>".
func splitMember(m string) (scope, unit string) {
	i := strings.LastIndexByte(m, '|')
	if i < 0 {
		return m, ""
	}
	return m[:i], m[i+1:]
}

// parseInt64 parses a stored amount exactly; false unless it is an int64.
func parseInt64(s string) (*big.Int, bool) {
	if s == "" || s[0] == '+' {
		return nil, false
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok || !n.IsInt64() {
		return nil, false
	}
	return n, true
}
