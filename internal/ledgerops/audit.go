package ledgerops

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/defaults"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
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
)

// Kinds lists every discrepancy kind (the label values of cycles_audit_discrepancies).
var Kinds = []string{
	KindReservedMismatch, KindBalanceIdentity, KindBudgetFieldInvalid, KindBudgetMissing,
	KindIndexOrphan, KindIndexFinalized, KindActiveNotIndexed, KindDeadlineScoreMismatch,
	KindInvalidRecord, KindQuarantined, KindQuarantineNotIndexed, KindQuarantineStale,
	KindTerminalNoTTL,
}

// budgetFields are the ledger amounts of a budget's packed balance
// (lua/ops/audit_budgets.lua splits it), in the order checked.
var budgetFields = []string{"allocated", "remaining", "reserved", "spent", "debt"}

// report is the full result of one audit.
type report struct {
	found []*cyclesv1.AuditDiscrepancy
	stats *cyclesv1.AuditStats
	// extra are ACTIVE ids outside both indexes (the holds scripts read them too).
	extra []string
}

func (r *report) add(d *cyclesv1.AuditDiscrepancy) { r.found = append(r.found, d) }

// addOnce adds f unless seen holds it already or, with an archive, it is a
// settled record without a TTL: such a record has none until the archiver
// stored it (internal/archiver), and giving it one could drop it unarchived.
// It reports whether f was added.
func (r *report) addOnce(f finding, seen map[string]bool, archive bool) bool {
	if seen[f.Kind+"|"+f.ID] || (archive && f.Kind == KindTerminalNoTTL) {
		return false
	}
	seen[f.Kind+"|"+f.ID] = true
	r.addFinding(f)
	return true
}

func (r *report) addFinding(f finding) {
	r.add(&cyclesv1.AuditDiscrepancy{Kind: f.Kind, ReservationId: f.ID,
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
	defaults.Set(&max, 1000)
	resp := &cyclesv1.AuditTenantResponse{TenantId: req.GetTenantId(), Stats: r.stats, Discrepancies: r.found}
	if len(r.found) > max {
		resp.Discrepancies, resp.Truncated = r.found[:max], true
	}
	return resp, nil
}

// audit runs every check on tenant in bounded script calls (pages). The
// clean path never runs an unbounded script: holds are summed page by page
// beside the records check. A budget whose reserved disagrees with those sums
// is a suspect (live traffic between pages can cause that); it is re-read in a
// second paged pass, and only one that disagrees again by the same amount is
// confirmed inside one script (lua/ops/holds.lua), which reads reserved and
// every holder at one instant.
func (s *Service) audit(ctx context.Context, tenant string) (*report, error) {
	s.audits.Add(ctx, 1)
	prefix := keys.Tenant(tenant).Prefix()
	r := &report{stats: &cyclesv1.AuditStats{}}

	held, err := s.recordsPass(ctx, prefix, r)
	if err != nil {
		return nil, fmt.Errorf("audit records of %s: %w", tenant, err)
	}
	if err := s.indexPasses(ctx, prefix, r); err != nil {
		return nil, fmt.Errorf("audit indexes of %s: %w", tenant, err)
	}
	reserved, identityBroken, err := s.budgetsPass(ctx, prefix, r)
	if err != nil {
		return nil, fmt.Errorf("audit budgets of %s: %w", tenant, err)
	}
	suspects := held.mismatches(reserved)
	if len(suspects) == 0 {
		return r, nil
	}
	// Second paged pass: a race moves on, a corruption stays put.
	held2, err := s.recordsPass(ctx, prefix, nil)
	if err != nil {
		return nil, fmt.Errorf("re-read holds of %s: %w", tenant, err)
	}
	reserved2, _, err := s.budgetsPass(ctx, prefix, nil)
	if err != nil {
		return nil, fmt.Errorf("re-read budgets of %s: %w", tenant, err)
	}
	again := held2.mismatches(reserved2)
	var members []string
	for m, d := range suspects {
		if d2, ok := again[m]; ok && d2.Cmp(d) == 0 {
			members = append(members, m)
		}
	}
	if len(members) == 0 {
		return r, nil
	}
	sort.Strings(members)
	h, err := s.holds(ctx, prefix, r.extra, members)
	if err != nil {
		return nil, fmt.Errorf("confirm holds of %s: %w", tenant, err)
	}
	for _, m := range members {
		scope, unit := splitMember(m)
		var ev map[string]string
		repairable := true
		switch {
		case h.OverLimit:
			// Too many holders to read at one instant: report what two
			// paged passes agreed on, for a human to judge.
			ev = map[string]string{"reserved": reserved2[m].String(), "sum_of_active_holds": held2.sum(m).String(),
				"confirmed": "two paged passes (too many ACTIVE reservations for one script)"}
			repairable = false
		case h.AllUncertain || h.Uncertain[m]:
			continue
		default:
			sum := h.Sums[m]
			if sum == "" {
				sum = "0"
			}
			res, ok := h.Reserved[m]
			rn, valid := parseInt64(res)
			sn, _ := parseInt64(sum)
			if !ok || !valid || rn.Cmp(sn) == 0 {
				continue
			}
			ev = map[string]string{"reserved": res, "sum_of_active_holds": sum}
			if q := h.Quarantined[m]; q != "" {
				ev["held_by_quarantined"] = q
				repairable = false
			}
		}
		r.add(&cyclesv1.AuditDiscrepancy{Kind: KindReservedMismatch, ScopePath: scope, Unit: unit,
			Message: "reserved != sum of the estimates of the ACTIVE reservations holding it", Evidence: ev, Repairable: repairable})
		if d := identityBroken[m]; d != nil {
			d.Repairable = repairable
		}
	}
	return r, nil
}

// heldTotals are the holds summed over the record pages.
type heldTotals struct {
	sums         map[string]*big.Int
	uncertain    map[string]bool
	allUncertain bool
}

func (h heldTotals) sum(m string) *big.Int {
	if v := h.sums[m]; v != nil {
		return v
	}
	return new(big.Int)
}

// mismatches returns reserved - sum for every budget whose reserved differs
// from the summed holds (budgets with an uncertain holder are left out).
func (h heldTotals) mismatches(reserved map[string]*big.Int) map[string]*big.Int {
	out := map[string]*big.Int{}
	if h.allUncertain {
		return out
	}
	for m, res := range reserved {
		if h.uncertain[m] {
			continue
		}
		if d := new(big.Int).Sub(res, h.sum(m)); d.Sign() != 0 {
			out[m] = d
		}
	}
	return out
}

// zpage is what every page of an index walk answers: its rows, the cursor
// of the next page and whether the walk is done; the audit's walks add
// their own counts.
type zpage[R any] struct {
	Rows script.LuaArray[R] `json:"rows"`
	Next cursor             `json:"next"`
	Done bool               `json:"done"`
}

// recordsPage is ops/audit_records' reply.
type recordsPage struct {
	zpage[finding]
	Records      int64          `json:"records"`
	Active       int64          `json:"active"`
	Quarantined  int64          `json:"quarantined"`
	Holds        luaMap[string] `json:"holds"`
	Uncertain    luaMap[bool]   `json:"uncertain"`
	AllUncertain bool           `json:"all_uncertain"`
}

// indexPage is ops/audit_index's reply.
type indexPage struct {
	zpage[finding]
	Entries int64 `json:"entries"`
}

// budgetsPage is ops/audit_budgets' reply: each budget's fields, or that
// it is missing or not a hash.
type budgetsPage struct {
	Rows script.LuaArray[struct {
		M         string         `json:"m"`
		Exists    bool           `json:"exists"`
		WrongType bool           `json:"wrong_type"`
		F         luaMap[string] `json:"f"`
		// Bad: the packed balance does not pass the ledger scripts' strict
		// reading (lua/lib/core.lua BAL.split), which refuses the budget.
		Bad bool `json:"bad"`
	}] `json:"rows"`
	Done bool `json:"done"`
}

// recordsPass pages through the created index. With r it records the
// findings and stats; it always returns the summed holds.
func (s *Service) recordsPass(ctx context.Context, prefix string, r *report) (heldTotals, error) {
	held := heldTotals{sums: map[string]*big.Int{}, uncertain: map[string]bool{}}
	seen := map[string]bool{} // a restarted page may repeat ids
	var cur cursor
	for {
		var page recordsPage
		if err := scriptAuditRecords.RunInto(ctx, s.exec, &page, prefixKeys{prefix}, zpageArgs{cur.Member, cur.Score, s.opts.PageSize}); err != nil {
			return held, err
		}
		for m, v := range page.Holds {
			n, ok := parseInt64(v)
			if !ok {
				held.uncertain[m] = true
				continue
			}
			if held.sums[m] == nil {
				held.sums[m] = new(big.Int)
			}
			held.sums[m].Add(held.sums[m], n)
		}
		for m := range page.Uncertain {
			held.uncertain[m] = true
		}
		held.allUncertain = held.allUncertain || page.AllUncertain
		if r != nil {
			r.stats.Records += page.Records
			r.stats.Active += page.Active
			r.stats.Quarantined += page.Quarantined
			for _, f := range page.Rows {
				if r.addOnce(f, seen, s.opts.Archive) && (f.Kind == KindActiveNotIndexed || f.Kind == KindQuarantineNotIndexed) {
					r.extra = append(r.extra, f.ID)
				}
			}
		}
		if page.Done || page.Next == cur {
			return held, nil
		}
		// A cursor whose member vanished restarts at its score, so a page may
		// repeat ids and over-count: at worst a false suspect, which the
		// second pass and the one-script confirmation then drop.
		cur = page.Next
	}
}

// indexPasses checks both indexes entry by entry.
func (s *Service) indexPasses(ctx context.Context, prefix string, r *report) error {
	seen := map[string]bool{}
	for _, which := range []string{"deadline", "quarantine"} {
		var cur cursor
		for {
			var page indexPage
			if err := scriptAuditIndex.RunInto(ctx, s.exec, &page, prefixKeys{prefix},
				indexPageArgs{which, cur.Member, cur.Score, s.opts.PageSize}); err != nil {
				return fmt.Errorf("%s index: %w", which, err)
			}
			if which == "deadline" {
				r.stats.DeadlineEntries += page.Entries
			}
			for _, f := range page.Rows {
				r.addOnce(f, seen, s.opts.Archive)
			}
			if page.Done || page.Next == cur {
				break
			}
			cur = page.Next
		}
	}
	return nil
}

// budgetsPass pages through the budgets: field checks and the balance
// identity (recorded in r when given). It returns the valid reserved values
// and the identity findings by member.
func (s *Service) budgetsPass(ctx context.Context, prefix string, r *report) (map[string]*big.Int, map[string]*cyclesv1.AuditDiscrepancy, error) {
	reserved := map[string]*big.Int{}
	identityBroken := map[string]*cyclesv1.AuditDiscrepancy{}
	add := func(d *cyclesv1.AuditDiscrepancy) {
		if r != nil {
			r.add(d)
		}
	}
	after := ""
	for {
		var page budgetsPage
		if err := scriptAuditBudgets.RunInto(ctx, s.exec, &page, prefixKeys{prefix}, budgetPageArgs{after, s.opts.PageSize}); err != nil {
			return nil, nil, err
		}
		for _, b := range page.Rows {
			if r != nil {
				r.stats.Budgets++
			}
			scope, unit := splitMember(b.M)
			switch {
			case !b.Exists:
				add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetMissing, ScopePath: scope, Unit: unit,
					Message: "the budgets index names a budget hash that does not exist"})
				continue
			case b.WrongType:
				add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetFieldInvalid, ScopePath: scope, Unit: unit,
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
					add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetFieldInvalid, ScopePath: scope, Unit: unit,
						Message: "budget field " + f + " is " + what, Evidence: map[string]string{"field": f, "value": raw},
						Repairable: f == "reserved" || f == "remaining"})
					continue
				}
				v[f] = n
			}
			if len(v) < len(budgetFields) {
				continue
			}
			if b.Bad {
				// Every amount parses, but the status, the flag or an amount's
				// form does not: the ledger refuses the budget; an operator
				// rewrites its balance (never automatically).
				add(&cyclesv1.AuditDiscrepancy{Kind: KindBudgetFieldInvalid, ScopePath: scope, Unit: unit,
					Message: "budget balance is not in its canonical form", Evidence: map[string]string{"field": "bal"}})
			}
			reserved[b.M] = v["reserved"]
			want := new(big.Int).Sub(v["allocated"], v["spent"])
			want.Sub(want, v["reserved"]).Sub(want, v["debt"])
			if want.Cmp(v["remaining"]) != 0 {
				ev["expected_remaining"] = want.String()
				d := &cyclesv1.AuditDiscrepancy{Kind: KindBalanceIdentity, ScopePath: scope, Unit: unit,
					Message: "remaining != allocated - spent - reserved - debt", Evidence: ev}
				add(d)
				identityBroken[b.M] = d
			}
		}
		if page.Done || len(page.Rows) == 0 {
			return reserved, identityBroken, nil
		}
		after = page.Rows[len(page.Rows)-1].M
	}
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
	err := scriptHolds.RunInto(ctx, s.exec, &h, prefixKeys{prefix}, holdsArgs{s.opts.HoldsLimit, string(x), string(m)})
	return h, err
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
