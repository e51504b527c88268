package policy

import (
	"slices"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// listFilter is the v0.1.26 part of a ListScopePolicies selection
// (governance extensions, listPolicies): quotas nil keeps every policy, true
// only those with an action or risk-class quota, false only those with
// none; kind, when set, keeps only policies whose action quotas or access
// lists name it. Risk-class quotas name a class, never a kind, so they do
// not reference one.
type listFilter struct {
	quotas *bool
	kind   string
}

// listFilterOf reads the filter of req. The kind is matched exactly and only
// bounded here: an undeclared kind is a valid question whose answer is
// empty ("which policies mention this kind?").
func listFilterOf(req *cyclesv1.ListScopePoliciesRequest) (listFilter, error) {
	k := req.GetReferencesActionKind()
	if len(k) > actionkind.MaxKindLen {
		return listFilter{}, apierr.Invalid("references_action_kind", "must be at most %d characters", actionkind.MaxKindLen)
	}
	return listFilter{quotas: req.HasActionQuotas, kind: k}, nil
}

func (f listFilter) match(p stored) bool {
	if f.quotas != nil && *f.quotas != (len(p.ActionQuotas) > 0 || len(p.RiskClassQuotas) > 0) {
		return false
	}
	return f.kind == "" || p.references(f.kind)
}

// references reports whether an action quota or an access list of p names kind.
func (p stored) references(kind string) bool {
	if slices.Contains(p.AllowedActionKinds, kind) || slices.Contains(p.DeniedActionKinds, kind) {
		return true
	}
	return slices.ContainsFunc(p.ActionQuotas, func(q storedQuota) bool { return q.ActionKind == kind })
}
