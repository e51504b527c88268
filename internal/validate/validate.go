// Package validate is the one validation path of cyclesd: the gRPC validation
// interceptor calls Message for every request, and every request type has
// exactly one validator registered here (a test enforces that). Validators
// check shape only (required fields, lengths, charsets, ranges, enum values);
// anything that needs state (tenant match, budgets) belongs to the domain.
//
// A failure is INVALID_REQUEST naming the field (ErrorInfo metadata "field").
package validate

import (
	"fmt"
	"sync"

	"github.com/cyclesgo/cycles-go/internal/cursor"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

type validatorFunc func(proto.Message) error

var (
	mu    sync.RWMutex
	table = map[protoreflect.FullName]validatorFunc{}
)

// register adds the validator of one request type (called from init funcs of
// this package only; the table is read-only afterwards).
func register[T proto.Message](f func(T) error) {
	var zero T
	name := zero.ProtoReflect().Descriptor().FullName()
	mu.Lock()
	defer mu.Unlock()
	if _, dup := table[name]; dup {
		panic("validate: duplicate validator for " + string(name))
	}
	table[name] = func(m proto.Message) error { return f(m.(T)) }
}

// first is the first error of checks, or nil when every check passed: a
// request is refused for its first bad field, in the order the validator
// lists them. Every check runs (each is bounded by the message size), so the
// list must not rely on an earlier check to be safe to evaluate.
func first(checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// declared refuses an enum number its enum does not declare (sent by a newer
// or broken client) with the message format and args.
func declared(field string, e protoreflect.Enum, format string, args ...any) error {
	if e.Descriptor().Values().ByNumber(e.Number()) == nil {
		return invalid(field, format, args...)
	}
	return nil
}

// Has reports whether a validator exists for the message type name.
func Has(name protoreflect.FullName) bool {
	mu.RLock()
	defer mu.RUnlock()
	_, ok := table[name]
	return ok
}

// Message validates a request. Types without a validator are refused, so a new
// RPC cannot silently skip validation.
func Message(m proto.Message) error {
	name := m.ProtoReflect().Descriptor().FullName()
	mu.RLock()
	f, ok := table[name]
	mu.RUnlock()
	if !ok {
		return apierr.New(apierr.InternalError, "no validator for %s", name)
	}
	return f(m)
}

// ---- field helpers -------------------------------------------------------

const (
	// MaxMetadataBytes bounds a metadata Struct (its proto encoding).
	MaxMetadataBytes = 16 * 1024
	// MaxTTLms is the protocol's ttl_ms / extend_by_ms ceiling.
	MaxTTLms = 86_400_000
	// MinTTLms is the protocol's ttl_ms floor.
	MinTTLms = 1_000
	// MaxGraceMs is the protocol's grace_period_ms ceiling.
	MaxGraceMs = 60_000
)

func invalid(field, format string, args ...any) error {
	return apierr.Invalid(field, format, args...)
}

// IdempotencyKey: required, [A-Za-z0-9_.-]{1,256}.
func IdempotencyKey(field, v string) error {
	if v == "" {
		return invalid(field, "is required")
	}
	if !scope.ValidToken(v, 256) {
		return invalid(field, "must be 1..256 characters of [A-Za-z0-9_.-]")
	}
	return nil
}

// ID: required, [A-Za-z0-9_.-]{1,max} (reservation ids, key ids, names).
func ID(field, v string, max int) error {
	if v == "" {
		return invalid(field, "is required")
	}
	if !scope.ValidToken(v, max) {
		return invalid(field, "must be 1..%d characters of [A-Za-z0-9_.-]", max)
	}
	return nil
}

// TenantID: required, [a-z0-9_.-]{1,64} (auth.MaxTenantIDLen).
func TenantID(field, v string) error {
	if v == "" {
		return invalid(field, "is required")
	}
	if !auth.ValidTenantID(v) {
		return invalid(field, "must be 1..%d characters of [a-z0-9_.-]", auth.MaxTenantIDLen)
	}
	return nil
}

// Text: optional free text of at most max bytes with no control characters.
func Text(field, v string, max int) error {
	if len(v) > max {
		return invalid(field, "must be at most %d bytes", max)
	}
	if !noControl(v) {
		return invalid(field, "must not contain control characters")
	}
	return nil
}

// textOK is Text's verdict alone: callers that compose the field name
// ("action.kind") check it first and build the name only for the error, not
// on every request.
func textOK(v string, max int) bool { return len(v) <= max && noControl(v) }

func noControl(v string) bool {
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Unit: required, not UNSPECIFIED, a known value.
func Unit(field string, u cyclesv1.Unit) error {
	if scope.UnitKey(u) == "" {
		return invalid(field, "must be one of USD_MICROCENTS, TOKENS, CREDITS, RISK_POINTS")
	}
	return nil
}

// OptionalUnit: UNSPECIFIED or a known value.
func OptionalUnit(field string, u cyclesv1.Unit) error {
	if u == cyclesv1.Unit_UNIT_UNSPECIFIED {
		return nil
	}
	return Unit(field, u)
}

// Policy: UNSPECIFIED (default) or a known value.
func Policy(field string, p cyclesv1.CommitOveragePolicy) error {
	return declared(field, p, "unknown overage policy %d", p)
}

// Amount: required, unit set, 0 <= amount.
func Amount(field string, a *cyclesv1.Amount) error {
	if a == nil {
		return invalid(field, "is required")
	}
	if scope.UnitKey(a.GetUnit()) == "" {
		return Unit(field+".unit", a.GetUnit())
	}
	if a.GetAmount() < 0 {
		return invalid(field+".amount", "must be >= 0")
	}
	return nil
}

// NonNegative: v >= 0.
func NonNegative(field string, v int64) error {
	if v < 0 {
		return invalid(field, "must be >= 0")
	}
	return nil
}

// Range: lo <= v <= hi.
func Range(field string, v, lo, hi int64) error {
	if v < lo || v > hi {
		return invalid(field, "must be between %d and %d", lo, hi)
	}
	return nil
}

// Subject: at least one standard field; values are scope values; dimensions bounded.
func Subject(field string, s *cyclesv1.Subject) error {
	if s == nil {
		return invalid(field, "is required")
	}
	vals := scope.SubjectValues(s)
	present := 0
	for i, v := range vals {
		if v == "" {
			continue
		}
		present++
		if !scope.ValidValue(v) {
			return invalid(field+"."+scope.Levels[i], "must match [a-zA-Z0-9_.-]{1,128}")
		}
	}
	if present == 0 {
		return invalid(field, "needs at least one of tenant, workspace, app, workflow, agent, toolset")
	}
	if len(s.GetDimensions()) == 0 {
		return nil
	}
	return Dimensions(field+".dimensions", s.GetDimensions())
}

// Dimensions: at most 16, keys [a-z0-9_.-]{1,64}, values <= 256 bytes.
func Dimensions(field string, d map[string]string) error {
	if len(d) > 16 {
		return invalid(field, "at most 16 entries")
	}
	for k, v := range d {
		if !auth.ValidTenantID(k) || len(k) > 64 {
			return invalid(field, "key %q must be 1..64 characters of [a-z0-9_.-]", k)
		}
		if err := Text(field+"."+k, v, 256); err != nil {
			return err
		}
	}
	return nil
}

// Action: kind (<=64) and name (<=256) required; <=10 tags of <=64.
func Action(field string, a *cyclesv1.Action) error {
	if a == nil {
		return invalid(field, "is required")
	}
	if a.GetKind() == "" {
		return invalid(field+".kind", "is required")
	}
	if !textOK(a.GetKind(), 64) {
		return Text(field+".kind", a.GetKind(), 64)
	}
	if a.GetName() == "" {
		return invalid(field+".name", "is required")
	}
	if !textOK(a.GetName(), 256) {
		return Text(field+".name", a.GetName(), 256)
	}
	if len(a.GetTags()) > 10 {
		return invalid(field+".tags", "at most 10 tags")
	}
	for i, t := range a.GetTags() {
		if t == "" {
			return invalid(fmt.Sprintf("%s.tags[%d]", field, i), "must not be empty")
		}
		if err := Text(fmt.Sprintf("%s.tags[%d]", field, i), t, 64); err != nil {
			return err
		}
	}
	return PolicyKeys(field+".policy_keys", a.GetPolicyKeys())
}

// PolicyKeys: the optional v0.1.26 routing dimensions of an Action, each
// bounded as the protocol's ActionPolicyKeys says (absent is fine).
func PolicyKeys(field string, k *cyclesv1.ActionPolicyKeys) error {
	if k == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    string
		max  int
	}{
		{"host", k.GetHost(), 253}, {"recipient_domain", k.GetRecipientDomain(), 253},
		{"resource_type", k.GetResourceType(), 128}, {"path_prefix", k.GetPathPrefix(), 512},
	} {
		if f.v != "" {
			if err := Text(field+"."+f.name, f.v, f.max); err != nil {
				return err
			}
		}
	}
	if len(k.GetCustom()) > 8 {
		return invalid(field+".custom", "at most 8 entries")
	}
	for name, v := range k.GetCustom() {
		if name == "" || !textOK(name, 64) {
			return invalid(field+".custom", "keys must be 1..64 characters")
		}
		if err := Text(field+".custom."+name, v, 256); err != nil {
			return err
		}
	}
	return nil
}

// ObserveMode: UNSPECIFIED (absent) or one of DISABLED, OBSERVE, ENFORCE.
func ObserveMode(field string, m cyclesv1.ObserveMode) error {
	switch m {
	case cyclesv1.ObserveMode_OBSERVE_MODE_UNSPECIFIED, cyclesv1.ObserveMode_OBSERVE_MODE_DISABLED,
		cyclesv1.ObserveMode_OBSERVE_MODE_OBSERVE, cyclesv1.ObserveMode_OBSERVE_MODE_ENFORCE:
		return nil
	}
	return invalid(field, "must be DISABLED, OBSERVE or ENFORCE")
}

// Metadata: optional Struct of at most MaxMetadataBytes.
func Metadata(field string, s *structpb.Struct) error {
	if s == nil {
		return nil
	}
	if proto.Size(s) > MaxMetadataBytes {
		return invalid(field, "must be at most %d bytes", MaxMetadataBytes)
	}
	return nil
}

// StringMap: optional map with bounded keys and values.
func StringMap(field string, m map[string]string) error {
	if len(m) > 64 {
		return invalid(field, "at most 64 entries")
	}
	for k, v := range m {
		if !scope.ValidToken(k, 64) {
			return invalid(field, "key %q must be 1..64 characters of [A-Za-z0-9_.-]", k)
		}
		if err := Text(field+"."+k, v, 1024); err != nil {
			return err
		}
	}
	return nil
}

// Metrics: optional, non-negative counters, bounded model_version.
func Metrics(field string, m *cyclesv1.StandardMetrics) error {
	if m == nil {
		return nil
	}
	return first(
		NonNegative(field+".tokens_input", m.GetTokensInput()),
		NonNegative(field+".tokens_output", m.GetTokensOutput()),
		NonNegative(field+".latency_ms", m.GetLatencyMs()),
		Text(field+".model_version", m.GetModelVersion(), 128),
		Metadata(field+".custom", m.GetCustom()),
	)
}

// Caps: optional, non-negative numbers, bounded lists.
func Caps(field string, c *cyclesv1.Caps) error {
	if c == nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"max_tokens", c.GetMaxTokens()}, {"max_steps_remaining", c.GetMaxStepsRemaining()}, {"cooldown_ms", c.GetCooldownMs()}} {
		if err := NonNegative(field+"."+f.name, f.v); err != nil {
			return err
		}
	}
	for name, list := range map[string][]string{"tool_allowlist": c.GetToolAllowlist(), "tool_denylist": c.GetToolDenylist()} {
		if len(list) > 256 {
			return invalid(field+"."+name, "at most 256 entries")
		}
		for _, t := range list {
			if t == "" {
				return invalid(field+"."+name, "entries must not be empty")
			}
			if err := Text(field+"."+name, t, 256); err != nil {
				return err
			}
		}
	}
	return nil
}

// Limit: a page size, 0 for the listing's default. A size above max is
// served as max (the page then says has_more), as clients written against
// the reference server expect (the Cycles dashboard asks for up to 2,000):
// the page-size maximum stays declared here, once, and is never exceeded.
func Limit(field string, v *int32, max int32) error {
	if *v < 0 {
		return invalid(field, "must not be negative")
	}
	*v = min(*v, max)
	return nil
}

// Cursor: optional opaque token of bounded size.
func Cursor(field, v string) error {
	if len(v) > cursor.MaxLen {
		return cursor.Invalid(field)
	}
	return nil
}
