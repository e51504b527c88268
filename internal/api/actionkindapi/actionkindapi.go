// Package actionkindapi is the gRPC ActionKindService: the public, read-only
// registry of action kinds (internal/actionkind). No key is needed; the
// chain's limits still apply.
package actionkindapi

import (
	"context"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Service implements cyclesv1.ActionKindServiceServer over a registry.
type Service struct {
	cyclesv1.UnimplementedActionKindServiceServer
	reg *actionkind.Registry
}

// New serves reg.
func New(reg *actionkind.Registry) *Service { return &Service{reg: reg} }

// ListActionKinds pages the built-in kinds.
func (s *Service) ListActionKinds(_ context.Context, req *cyclesv1.ListActionKindsRequest) (*cyclesv1.ListActionKindsResponse, error) {
	risk := actionkind.RiskOf(req.GetRiskClass())
	if risk == "" && req.GetRiskClass() != cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_UNSPECIFIED {
		return nil, apierr.Invalid("risk_class", "unknown risk class %d", req.GetRiskClass())
	}
	return s.reg.List(risk, req.GetDeprecated(), req.GetCursor(), int(req.GetLimit()))
}

// GetActionKind returns one built-in kind by exact name.
func (s *Service) GetActionKind(_ context.Context, req *cyclesv1.GetActionKindRequest) (*cyclesv1.GetActionKindResponse, error) {
	if n := len(req.GetKind()); n == 0 || n > actionkind.MaxKindLen {
		return nil, apierr.Invalid("kind", "must be 1..%d characters", actionkind.MaxKindLen)
	}
	k, err := s.reg.Get(req.GetKind())
	if err != nil {
		return nil, err
	}
	return &cyclesv1.GetActionKindResponse{Kind: k}, nil
}
