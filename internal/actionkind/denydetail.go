package actionkind

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
)

// DenyDetail's JSON form is the protocol's DenyDetail object. The ledger
// scripts build it (amounts as JSON numbers or decimal strings: Lua has no
// int64), the HTTP wire sends it (amounts as JSON numbers), and a gRPC error
// carries it in the ErrorInfo metadata key MetadataKey. ParseDenyDetail and
// WireDenyDetail are the one mapping between that form and the proto.

// MetadataKey is the ErrorInfo metadata key of a refusal's DenyDetail JSON
// (and the key of details.deny_detail in an HTTP error body).
const MetadataKey = "deny_detail"

// DenyDetailJSON is the wire form of a DenyDetail.
type DenyDetailJSON struct {
	ReasonCode      string              `json:"reason_code"`
	QuotaViolation  *QuotaViolationJSON `json:"quota_violation,omitempty"`
	BlockedByScope  string              `json:"blocked_by_scope,omitempty"`
	BlockedByPolicy string              `json:"blocked_by_policy,omitempty"`
	SuggestedFix    string              `json:"suggested_fix,omitempty"`
	BudgetRemaining *Int64              `json:"budget_remaining,omitempty"`
}

// QuotaViolationJSON is the wire form of an ActionQuotaViolation.
type QuotaViolationJSON struct {
	ActionKind string `json:"action_kind"`
	Window     string `json:"window"`
	WindowKey  string `json:"window_key,omitempty"`
	Used       Int64  `json:"used"`
	Limit      Int64  `json:"limit"`
	Scope      string `json:"scope"`
	PolicyID   string `json:"policy_id,omitempty"`
	RiskClass  string `json:"risk_class,omitempty"`
}

// Int64 is an exact int64 that decodes from a JSON integer or a decimal
// string and encodes as a JSON integer (never through float64).
type Int64 int64

// UnmarshalJSON accepts 42 and "42".
func (n *Int64) UnmarshalJSON(b []byte) error {
	b = bytes.Trim(b, `"`)
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("not an int64: %s", b)
	}
	*n = Int64(v)
	return nil
}

// MarshalJSON writes the decimal integer.
func (n Int64) MarshalJSON() ([]byte, error) { return strconv.AppendInt(nil, int64(n), 10), nil }

// ParseDenyDetail reads a DenyDetail's JSON form; nil for "" (none).
func ParseDenyDetail(s string) (*cyclesv1.DenyDetail, error) {
	if s == "" {
		return nil, nil
	}
	var w DenyDetailJSON
	if err := json.Unmarshal([]byte(s), &w); err != nil {
		return nil, fmt.Errorf("deny detail: %w", err)
	}
	if w.ReasonCode == "" {
		return nil, fmt.Errorf("deny detail without reason_code")
	}
	out := &cyclesv1.DenyDetail{
		ReasonCode: w.ReasonCode, BlockedByScope: w.BlockedByScope, BlockedByPolicy: w.BlockedByPolicy,
		SuggestedFix: w.SuggestedFix,
	}
	if w.BudgetRemaining != nil {
		v := int64(*w.BudgetRemaining)
		out.BudgetRemaining = &v
	}
	if q := w.QuotaViolation; q != nil {
		win, _ := ParseWindow(q.Window)
		out.QuotaViolation = &cyclesv1.ActionQuotaViolation{
			ActionKind: q.ActionKind, Window: win, WindowKey: q.WindowKey, Used: int64(q.Used), Limit: int64(q.Limit),
			Scope: q.Scope, PolicyId: q.PolicyID, RiskClass: RiskClass(q.RiskClass).Proto(),
		}
	}
	return out, nil
}

// WireDenyDetail is d's wire form; nil for nil.
func WireDenyDetail(d *cyclesv1.DenyDetail) *DenyDetailJSON {
	if d == nil {
		return nil
	}
	out := &DenyDetailJSON{
		ReasonCode: d.GetReasonCode(), BlockedByScope: d.GetBlockedByScope(), BlockedByPolicy: d.GetBlockedByPolicy(),
		SuggestedFix: d.GetSuggestedFix(),
	}
	if d.BudgetRemaining != nil {
		v := Int64(d.GetBudgetRemaining())
		out.BudgetRemaining = &v
	}
	if q := d.GetQuotaViolation(); q != nil {
		out.QuotaViolation = &QuotaViolationJSON{
			ActionKind: q.GetActionKind(), Window: WindowName(q.GetWindow()), WindowKey: q.GetWindowKey(),
			Used: Int64(q.GetUsed()), Limit: Int64(q.GetLimit()), Scope: q.GetScope(), PolicyID: q.GetPolicyId(),
			RiskClass: string(RiskOf(q.GetRiskClass())),
		}
	}
	return out
}

// DenyDetailString is d's JSON form as a string (ErrorInfo metadata); "" for nil.
func DenyDetailString(d *cyclesv1.DenyDetail) string {
	w := WireDenyDetail(d)
	if w == nil {
		return ""
	}
	b, err := json.Marshal(w)
	if err != nil {
		// Only strings and integers: cannot fail.
		return ""
	}
	return string(b)
}
