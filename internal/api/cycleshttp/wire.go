package cycleshttp

import (
	"encoding/json"
	"strconv"

	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Request bodies as the protocol spells them (cycles-protocol-v0, see
// docs/http-api.md). Optional fields are pointers so "absent" and "zero"
// stay distinct; amounts decode straight into int64 (encoding/json parses
// integer literals with strconv, never through float64), so every int64 is
// exact and anything else (fractions, out of range, strings) is a 400 naming
// the field.

type amountIn struct {
	Unit   *string `json:"unit"`
	Amount *int64  `json:"amount"`
}

type subjectIn struct {
	Tenant     *string           `json:"tenant"`
	Workspace  *string           `json:"workspace"`
	App        *string           `json:"app"`
	Workflow   *string           `json:"workflow"`
	Agent      *string           `json:"agent"`
	Toolset    *string           `json:"toolset"`
	Dimensions map[string]string `json:"dimensions"`
}

type actionIn struct {
	Kind       string        `json:"kind"`
	Name       string        `json:"name"`
	Tags       []string      `json:"tags"`
	PolicyKeys *policyKeysIn `json:"policy_keys"`
}

// policyKeysIn is the v0.1.26 ActionPolicyKeys.
type policyKeysIn struct {
	Host            string            `json:"host"`
	RecipientDomain string            `json:"recipient_domain"`
	ResourceType    string            `json:"resource_type"`
	PathPrefix      string            `json:"path_prefix"`
	Custom          map[string]string `json:"custom"`
}

type metricsIn struct {
	TokensInput  *int64         `json:"tokens_input"`
	TokensOutput *int64         `json:"tokens_output"`
	LatencyMs    *int64         `json:"latency_ms"`
	ModelVersion string         `json:"model_version"`
	Custom       map[string]any `json:"custom"`
}

type reserveIn struct {
	IdempotencyKey string         `json:"idempotency_key"`
	Subject        *subjectIn     `json:"subject"`
	Action         *actionIn      `json:"action"`
	Estimate       *amountIn      `json:"estimate"`
	TTLMs          *int64         `json:"ttl_ms"`
	GracePeriodMs  *int64         `json:"grace_period_ms"`
	OveragePolicy  *string        `json:"overage_policy"`
	DryRun         *bool          `json:"dry_run"`
	Metadata       map[string]any `json:"metadata"`
	// ObserveMode is the v0.1.26 per-request override (DISABLED, OBSERVE, ENFORCE).
	ObserveMode *string `json:"observe_mode"`
}

type decideIn struct {
	IdempotencyKey string         `json:"idempotency_key"`
	Subject        *subjectIn     `json:"subject"`
	Action         *actionIn      `json:"action"`
	Estimate       *amountIn      `json:"estimate"`
	Metadata       map[string]any `json:"metadata"`
}

type commitIn struct {
	IdempotencyKey string         `json:"idempotency_key"`
	Actual         *amountIn      `json:"actual"`
	Metrics        *metricsIn     `json:"metrics"`
	Metadata       map[string]any `json:"metadata"`
}

type releaseIn struct {
	IdempotencyKey string `json:"idempotency_key"`
	Reason         string `json:"reason"`
}

type extendIn struct {
	IdempotencyKey string         `json:"idempotency_key"`
	ExtendByMs     *int64         `json:"extend_by_ms"`
	Metadata       map[string]any `json:"metadata"`
}

type eventIn struct {
	IdempotencyKey string         `json:"idempotency_key"`
	Subject        *subjectIn     `json:"subject"`
	Action         *actionIn      `json:"action"`
	Actual         *amountIn      `json:"actual"`
	OveragePolicy  *string        `json:"overage_policy"`
	Metrics        *metricsIn     `json:"metrics"`
	ClientTimeMs   *int64         `json:"client_time_ms"`
	Metadata       map[string]any `json:"metadata"`
}

// ---- request translation -----------------------------------------------------

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

func (s *subjectIn) proto() (*cyclesv1.Subject, error) {
	if s == nil {
		return nil, nil
	}
	out := &cyclesv1.Subject{Dimensions: s.Dimensions}
	for _, f := range []struct {
		name string
		in   *string
		out  *string
	}{
		{"tenant", s.Tenant, &out.Tenant},
		{"workspace", s.Workspace, &out.Workspace},
		{"app", s.App, &out.App},
		{"workflow", s.Workflow, &out.Workflow},
		{"agent", s.Agent, &out.Agent},
		{"toolset", s.Toolset, &out.Toolset},
	} {
		if f.in == nil {
			continue
		}
		if *f.in == "" {
			// Present but empty is not "absent": the protocol's charset
			// pattern refuses it.
			return nil, apierr.Invalid("subject."+f.name, "must not be empty")
		}
		*f.out = *f.in
	}
	return out, nil
}

func (a *actionIn) proto() *cyclesv1.Action {
	if a == nil {
		return nil
	}
	out := &cyclesv1.Action{Kind: a.Kind, Name: a.Name, Tags: a.Tags}
	if k := a.PolicyKeys; k != nil {
		out.PolicyKeys = &cyclesv1.ActionPolicyKeys{Host: k.Host, RecipientDomain: k.RecipientDomain,
			ResourceType: k.ResourceType, PathPrefix: k.PathPrefix, Custom: k.Custom}
	}
	return out
}

func (m *metricsIn) proto(field string) (*cyclesv1.StandardMetrics, error) {
	if m == nil {
		return nil, nil
	}
	custom, err := structOf(field+".custom", m.Custom)
	if err != nil {
		return nil, err
	}
	return &cyclesv1.StandardMetrics{TokensInput: m.TokensInput, TokensOutput: m.TokensOutput,
		LatencyMs: m.LatencyMs, ModelVersion: m.ModelVersion, Custom: custom}, nil
}

func policyOf(field string, s *string) (cyclesv1.CommitOveragePolicy, error) {
	if s == nil {
		return cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_UNSPECIFIED, nil
	}
	v, err := parseEnum(field, *s, policyValues)
	return cyclesv1.CommitOveragePolicy(v), err
}

// structOf converts free-form JSON metadata (decoded with UseNumber) into
// the protobuf Struct the ledger stores. Metadata numbers become doubles, as
// in any protobuf Struct; amounts never travel here.
func structOf(field string, m map[string]any) (*structpb.Struct, error) {
	if m == nil {
		return nil, nil
	}
	out := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(m))}
	for k, v := range m {
		pv, err := valueOf(v)
		if err != nil {
			return nil, apierr.Invalid(field+"."+k, "%v", err)
		}
		out.Fields[k] = pv
	}
	return out, nil
}

func valueOf(v any) (*structpb.Value, error) {
	switch x := v.(type) {
	case json.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return nil, err
		}
		return structpb.NewNumberValue(f), nil
	case map[string]any:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(x))}
		for k, e := range x {
			pv, err := valueOf(e)
			if err != nil {
				return nil, err
			}
			s.Fields[k] = pv
		}
		return structpb.NewStructValue(s), nil
	case []any:
		l := &structpb.ListValue{Values: make([]*structpb.Value, 0, len(x))}
		for _, e := range x {
			pv, err := valueOf(e)
			if err != nil {
				return nil, err
			}
			l.Values = append(l.Values, pv)
		}
		return structpb.NewListValue(l), nil
	default:
		return structpb.NewValue(v)
	}
}

// creating holds what the creating bodies (reserve, decide, event) share.
type creating struct {
	subject  *cyclesv1.Subject
	action   *cyclesv1.Action
	amount   *cyclesv1.Amount
	metadata *structpb.Struct
}

// creatingOf reads the shared members: subject, action, the amount under
// field, metadata.
func creatingOf(s *subjectIn, a *actionIn, field string, amt *amountIn, meta map[string]any) (c creating, err error) {
	if c.subject, err = s.proto(); err != nil {
		return c, err
	}
	if c.amount, err = amt.proto(field); err != nil {
		return c, err
	}
	if c.metadata, err = structOf("metadata", meta); err != nil {
		return c, err
	}
	c.action = a.proto()
	return c, nil
}

func (r *reserveIn) fill(out *cyclesv1.CreateReservationRequest) error {
	c, err := creatingOf(r.Subject, r.Action, "estimate", r.Estimate, r.Metadata)
	if err != nil {
		return err
	}
	if out.OveragePolicy, err = policyOf("overage_policy", r.OveragePolicy); err != nil {
		return err
	}
	if r.ObserveMode != nil {
		m, ok := actionkind.ParseObserveMode(*r.ObserveMode)
		if !ok {
			return apierr.Invalid("observe_mode", "must be DISABLED, OBSERVE or ENFORCE")
		}
		out.ObserveMode = m
	}
	out.IdempotencyKey, out.Subject, out.Action, out.Estimate, out.Metadata = r.IdempotencyKey, c.subject, c.action, c.amount, c.metadata
	out.TtlMs, out.GracePeriodMs, out.DryRun = r.TTLMs, r.GracePeriodMs, r.DryRun != nil && *r.DryRun
	return nil
}

func (r *decideIn) fill(out *cyclesv1.DecideRequest) error {
	c, err := creatingOf(r.Subject, r.Action, "estimate", r.Estimate, r.Metadata)
	out.IdempotencyKey, out.Subject, out.Action, out.Estimate, out.Metadata = r.IdempotencyKey, c.subject, c.action, c.amount, c.metadata
	return err
}

// fill: the reservation id comes from the path.
func (r *commitIn) fill(out *cyclesv1.CommitReservationRequest) error {
	var err error
	if out.Actual, err = r.Actual.proto("actual"); err != nil {
		return err
	}
	if out.Metrics, err = r.Metrics.proto("metrics"); err != nil {
		return err
	}
	if out.Metadata, err = structOf("metadata", r.Metadata); err != nil {
		return err
	}
	out.IdempotencyKey = r.IdempotencyKey
	return nil
}

func (r *releaseIn) fill(out *cyclesv1.ReleaseReservationRequest) error {
	out.IdempotencyKey, out.Reason = r.IdempotencyKey, r.Reason
	return nil
}

func (r *extendIn) fill(out *cyclesv1.ExtendReservationRequest) error {
	if r.ExtendByMs == nil {
		return apierr.Invalid("extend_by_ms", "is required")
	}
	var err error
	if out.Metadata, err = structOf("metadata", r.Metadata); err != nil {
		return err
	}
	out.IdempotencyKey, out.ExtendByMs = r.IdempotencyKey, *r.ExtendByMs
	return nil
}

func (r *eventIn) fill(out *cyclesv1.CreateEventRequest) error {
	c, err := creatingOf(r.Subject, r.Action, "actual", r.Actual, r.Metadata)
	if err != nil {
		return err
	}
	if out.OveragePolicy, err = policyOf("overage_policy", r.OveragePolicy); err != nil {
		return err
	}
	if out.Metrics, err = r.Metrics.proto("metrics"); err != nil {
		return err
	}
	if r.ClientTimeMs != nil && *r.ClientTimeMs < 0 {
		return apierr.Invalid("client_time_ms", "must be >= 0")
	}
	out.IdempotencyKey, out.Subject, out.Action, out.Actual, out.Metadata = r.IdempotencyKey, c.subject, c.action, c.amount, c.metadata
	out.ClientTimeMs = r.ClientTimeMs
	return nil
}
