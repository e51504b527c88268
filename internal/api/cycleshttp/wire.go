package cycleshttp

import (
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// The admin bodies that still differ from their requests (admin.go, bulk.go,
// policies.go) read amounts and overage policies through these: their proto
// requests carry a bare int64 in the budget's unit where the spec sends an
// amount object, so the object is read here and its unit checked there.

// amountIn is the spec's Amount object in a body decoded by decodeJSON.
type amountIn struct {
	Unit   *string `json:"unit"`
	Amount *int64  `json:"amount"`
}

func (a *amountIn) proto(field string) (*cyclesv1.Amount, error) {
	if a == nil {
		return nil, nil // the validator names the missing field
	}
	if a.Unit == nil {
		return nil, apierr.Invalid(field+".unit", "is required")
	}
	if a.Amount == nil {
		return nil, apierr.Invalid(field+".amount", "is required")
	}
	u, err := parseEnum(field+".unit", *a.Unit, unitValues)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.Amount{Unit: cyclesv1.Unit(u), Amount: *a.Amount}, nil
}

func policyOf(field string, s *string) (cyclesv1.CommitOveragePolicy, error) {
	if s == nil {
		return cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED, nil
	}
	v, err := parseEnum(field, *s, policyValues)
	return cyclesv1.CommitOveragePolicy(v), err
}
