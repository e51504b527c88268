// Package actionkind is the Cycles v0.1.26 action-kind registry: the canonical
// kinds with their risk classes and policy key specs, the operator's declared
// custom.* kinds, how a request's kind is classified for the reserve path,
// and the wire forms shared by both transports (risk classes, quota windows,
// observe modes and DenyDetail; docs/protocol.md#v0126-action-governance).
//
// The registry is immutable after New: it is built once at start-up and read
// without locks.
package actionkind

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/cursor"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
)

// Version is the registry version served by ListActionKinds.
const Version = "0.1.26"

// RiskCounter is the action_kind of risk-class quota counters.
const RiskCounter = "__risk__"

// CustomPrefix starts every operator-declared kind.
const CustomPrefix = "custom."

// MaxKindLen bounds an action kind string.
const MaxKindLen = 64

// RiskClass is a risk class as the protocol spells it ("read_only", ...).
type RiskClass string

// The risk classes in ascending order.
const (
	ReadOnly           RiskClass = "read_only"
	LocalMutation      RiskClass = "local_mutation"
	SideEffect         RiskClass = "side_effect"
	ExternalSideEffect RiskClass = "external_side_effect"
	HighRisk           RiskClass = "high_risk"
)

// riskProto maps each class to its proto enum; the order is the ascending risk order.
var riskProto = []struct {
	c RiskClass
	p cyclesv1.ActionRiskClass
}{
	{ReadOnly, cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_READ_ONLY},
	{LocalMutation, cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_LOCAL_MUTATION},
	{SideEffect, cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_SIDE_EFFECT},
	{ExternalSideEffect, cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_EXTERNAL_SIDE_EFFECT},
	{HighRisk, cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_HIGH_RISK},
}

// Proto is c's enum value (UNSPECIFIED for an unknown class).
func (c RiskClass) Proto() cyclesv1.ActionRiskClass {
	for _, r := range riskProto {
		if r.c == c {
			return r.p
		}
	}
	return cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_UNSPECIFIED
}

// RiskOf is the wire name of an enum value ("" for UNSPECIFIED).
func RiskOf(p cyclesv1.ActionRiskClass) RiskClass {
	for _, r := range riskProto {
		if r.p == p {
			return r.c
		}
	}
	return ""
}

// ParseRisk reads a wire risk class; ok is false for anything else.
func ParseRisk(s string) (RiskClass, bool) {
	c := RiskClass(s)
	return c, c.Proto() != cyclesv1.ActionRiskClass_ACTION_RISK_CLASS_UNSPECIFIED
}

// windows maps the quota windows' wire names to their enum values.
var windows = []struct {
	s string
	p cyclesv1.ActionQuotaWindow
}{
	{"per_run", cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_RUN},
	{"per_minute_tumbling", cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_MINUTE_TUMBLING},
	{"per_hour_tumbling", cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_HOUR_TUMBLING},
	{"per_day_tumbling", cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_DAY_TUMBLING},
	{"per_tenant_per_day", cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_PER_TENANT_PER_DAY},
}

// ParseWindow reads a wire quota window; ok is false for anything else.
func ParseWindow(s string) (cyclesv1.ActionQuotaWindow, bool) {
	for _, w := range windows {
		if w.s == s {
			return w.p, true
		}
	}
	return cyclesv1.ActionQuotaWindow_ACTION_QUOTA_WINDOW_UNSPECIFIED, false
}

// WindowName is the wire name of a quota window ("" for UNSPECIFIED).
func WindowName(p cyclesv1.ActionQuotaWindow) string {
	for _, w := range windows {
		if w.p == p {
			return w.s
		}
	}
	return ""
}

// ParseObserveMode reads a wire observe mode ("DISABLED", "OBSERVE",
// "ENFORCE"); ok is false for anything else.
func ParseObserveMode(s string) (cyclesv1.ObserveMode, bool) {
	switch s {
	case "DISABLED":
		return cyclesv1.ObserveMode_OBSERVE_MODE_DISABLED, true
	case "OBSERVE":
		return cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE, true
	case "ENFORCE":
		return cyclesv1.ObserveMode_OBSERVE_MODE_ENFORCE, true
	}
	return cyclesv1.ObserveMode_OBSERVE_MODE_UNSPECIFIED, false
}

// ObserveModeName is the wire name of m; UNSPECIFIED reads as "ENFORCE" (the
// stored default of every tenant).
func ObserveModeName(m cyclesv1.ObserveMode) string {
	switch m {
	case cyclesv1.ObserveMode_OBSERVE_MODE_DISABLED:
		return "DISABLED"
	case cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE:
		return "OBSERVE"
	default:
		return "ENFORCE"
	}
}

// PolicyKeySpec says which ActionPolicyKeys dimensions matter for a kind.
type PolicyKeySpec struct {
	Host            bool
	RecipientDomain bool
	ResourceType    string
	PathPrefix      bool
}

// Kind is one registry entry.
type Kind struct {
	Name            string
	Risk            RiskClass
	Description     string
	PolicyKeys      *PolicyKeySpec
	MCPToolPrefixes []string
	Deprecated      bool
	Replacement     string
}

// Proto is k as the API returns it.
func (k Kind) Proto() *cyclesv1.ActionKind {
	out := &cyclesv1.ActionKind{
		Kind: k.Name, RiskClass: k.Risk.Proto(), Description: k.Description,
		McpToolPrefixes: k.MCPToolPrefixes, Deprecated: k.Deprecated, ReplacementKind: k.Replacement,
	}
	if s := k.PolicyKeys; s != nil {
		out.PolicyKeySpec = &cyclesv1.ActionPolicyKeySpec{
			Host: s.Host, RecipientDomain: s.RecipientDomain, ResourceType: s.ResourceType, PathPrefix: s.PathPrefix,
		}
	}
	return out
}

// Registry is the built-in kinds plus the declared custom.* kinds.
type Registry struct {
	byName map[string]int // index into builtin
	custom map[string]Kind
}

// customName is custom.<org>.<operation>[.<qualifier>...]: lower-case
// segments of letters, digits, '_' and '-'.
var customName = regexp.MustCompile(`^custom\.[a-z0-9_-]+(\.[a-z0-9_-]+)+$`)

// New builds the registry with the operator's custom kinds (ParseCustom).
// A declaration that is not custom.<org>.<operation> or has no valid risk
// class is an error: the server refuses to start rather than govern with it.
func New(custom []Kind) (*Registry, error) {
	r := &Registry{byName: make(map[string]int, len(builtin)), custom: make(map[string]Kind, len(custom))}
	for i, k := range builtin {
		r.byName[k.Name] = i
	}
	for _, k := range custom {
		if len(k.Name) > MaxKindLen || !customName.MatchString(k.Name) {
			return nil, fmt.Errorf("custom action kind %q: must be custom.<org>.<operation>[.<qualifier>], at most %d characters", k.Name, MaxKindLen)
		}
		if _, ok := ParseRisk(string(k.Risk)); !ok {
			return nil, fmt.Errorf("custom action kind %q: unknown risk class %q", k.Name, k.Risk)
		}
		if _, dup := r.custom[k.Name]; dup {
			return nil, fmt.Errorf("custom action kind %q declared twice", k.Name)
		}
		r.custom[k.Name] = k
	}
	return r, nil
}

// ParseCustom reads custom kind declarations "custom.acme.erp.post=side_effect"
// separated by commas (the -custom-action-kinds setting); empty is none.
func ParseCustom(s string) ([]Kind, error) {
	var out []Kind
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, risk, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("custom action kind %q: want <kind>=<risk_class>", part)
		}
		out = append(out, Kind{Name: strings.TrimSpace(name), Risk: RiskClass(strings.TrimSpace(risk))})
	}
	return out, nil
}

// Builtin reports whether name is a built-in kind, and its entry.
func (r *Registry) Builtin(name string) (Kind, bool) {
	i, ok := r.byName[name]
	if !ok {
		return Kind{}, false
	}
	return builtin[i], true
}

// Class is what the reserve path knows of a request's kind.
type Class struct {
	// Risk is the kind's risk class; side_effect for an unregistered kind
	// outside custom.*; "" for an undeclared custom.* kind, which the spec
	// refuses instead of classifying.
	Risk RiskClass
	// Registered: a built-in or a declared custom kind.
	Registered bool
}

// Classify is the registry's answer for a request's action kind.
func (r *Registry) Classify(kind string) Class {
	if k, ok := r.Builtin(kind); ok {
		return Class{Risk: k.Risk, Registered: true}
	}
	if k, ok := r.custom[kind]; ok {
		return Class{Risk: k.Risk, Registered: true}
	}
	if strings.HasPrefix(kind, CustomPrefix) {
		return Class{}
	}
	return Class{Risk: SideEffect}
}

// UndeclaredCustom is the refusal of an undeclared custom.* kind where the
// registry governs (INVALID_REQUEST naming action.kind).
func UndeclaredCustom(kind string) *apierr.Error {
	return apierr.Invalid("action.kind", "%q is not a declared custom action kind (declare it with -custom-action-kinds)", kind)
}

// DefaultPageSize and MaxPageSize bound ListActionKinds pages.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
)

// List pages the built-in kinds in registry order: risk filters by class
// ("" for all), deprecated includes deprecated kinds, after is the cursor of
// the previous page ("" for the first).
func (r *Registry) List(risk RiskClass, deprecated bool, after string, limit int) (*cyclesv1.ListActionKindsResponse, error) {
	switch {
	case limit == 0:
		limit = DefaultPageSize
	case limit < 1 || limit > MaxPageSize:
		return nil, apierr.Invalid("limit", "must be 1..%d", MaxPageSize)
	}
	start := 0
	if after != "" {
		last, err := cursor.Decode("cursor", after)
		if err != nil {
			return nil, err
		}
		i, ok := r.byName[last]
		if !ok {
			return nil, cursor.Invalid("cursor")
		}
		start = i + 1
	}
	out := &cyclesv1.ListActionKindsResponse{Version: Version}
	for i := start; i < len(builtin); i++ {
		k := builtin[i]
		if (risk != "" && k.Risk != risk) || (k.Deprecated && !deprecated) {
			continue
		}
		if len(out.Kinds) == limit {
			// The cursor holds the last kind returned: the next page resumes after it.
			out.HasMore = true
			out.NextCursor = cursor.Encode(out.Kinds[len(out.Kinds)-1].GetKind())
			break
		}
		out.Kinds = append(out.Kinds, k.Proto())
	}
	return out, nil
}

// Get is one built-in kind by exact name; NOT_FOUND otherwise (custom kinds
// are not published).
func (r *Registry) Get(name string) (*cyclesv1.ActionKind, error) {
	k, ok := r.Builtin(name)
	if !ok {
		return nil, apierr.New(apierr.NotFound, "action kind %q is not in the registry", name).With("kind", name)
	}
	return k.Proto(), nil
}

// Kinds is every built-in kind name in registry order (tests, docs).
func Kinds() []string {
	out := make([]string, len(builtin))
	for i, k := range builtin {
		out[i] = k.Name
	}
	return slices.Clip(out)
}
