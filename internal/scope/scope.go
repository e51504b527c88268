// Package scope derives canonical scope paths (docs/protocol.md#scopes-and-budgets)
// and names units in their key form.
//
// The effective tenant is always the root: a subject {workspace: Prod, agent: a}
// of tenant acme derives "tenant:acme/workspace:prod/agent:a" with affected
// scopes "tenant:acme", "tenant:acme/workspace:prod" and the full path.
// Values are lowercased (so clients written against the reference server hit
// the same budgets); anything outside [a-zA-Z0-9_.-]{1,128} is refused, never
// rewritten.
package scope

import (
	"fmt"
	"slices"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/enumkey"
)

// Levels in canonical order.
var Levels = [...]string{"tenant", "workspace", "app", "workflow", "agent", "toolset"}

// MaxValueLen bounds one scope value.
const MaxValueLen = 128

// ValidValue reports whether v is a legal scope value.
func ValidValue(v string) bool {
	return ValidToken(v, MaxValueLen)
}

// ValidToken reports whether s is 1..max characters of [A-Za-z0-9_.-]: the
// alphabet of scope values, which the protocol's ids and keys share
// (internal/validate) and tenant ids narrow to lower case (internal/auth).
func ValidToken(s string, max int) bool {
	if len(s) < 1 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// SubjectValues returns the subject's standard fields in canonical order
// (index 0 is tenant).
func SubjectValues(s *cyclesv1.Subject) [6]string {
	return [6]string{s.GetTenant(), s.GetWorkspace(), s.GetApp(), s.GetWorkflow(), s.GetAgent(), s.GetToolset()}
}

// Derived is the scope derivation of one subject.
type Derived struct {
	// Path is the full canonical scope path.
	Path string
	// Affected are the cumulative prefixes, root first; the last equals Path.
	Affected []string
}

// Derive builds the canonical scopes of subj under tenant. The subject's own
// tenant field is ignored here (the caller checks it against the tenant).
func Derive(tenant string, subj *cyclesv1.Subject) (Derived, error) {
	vals := SubjectValues(subj)
	vals[0] = tenant
	var b strings.Builder
	affected := make([]string, 0, 6)
	for i, v := range vals {
		if v == "" {
			continue
		}
		if !ValidValue(v) {
			return Derived{}, fmt.Errorf("subject.%s: must match [a-zA-Z0-9_.-]{1,128}", Levels[i])
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(Levels[i])
		b.WriteByte(':')
		b.WriteString(strings.ToLower(v))
		affected = append(affected, b.String())
	}
	return Derived{Path: b.String(), Affected: affected}, nil
}

// Canonical validates a scope path written by an operator ("tenant:acme/agent:Bot")
// and returns it lowercased. It must start with tenant:<tenant>, and levels must
// appear at most once, in canonical order.
func Canonical(tenant, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("scope path is empty")
	}
	segs := strings.Split(path, "/")
	out := make([]string, 0, len(segs))
	last := -1
	for i, seg := range segs {
		level, value, ok := strings.Cut(seg, ":")
		if !ok {
			return "", fmt.Errorf("segment %q: want <level>:<value>", seg)
		}
		idx := LevelIndex(level)
		if idx < 0 {
			return "", fmt.Errorf("segment %q: unknown level %q", seg, level)
		}
		if i == 0 && idx != 0 {
			return "", fmt.Errorf("scope path must start with tenant:%s", tenant)
		}
		if idx <= last {
			return "", fmt.Errorf("segment %q: levels must be unique and in the order %s", seg, strings.Join(Levels[:], ", "))
		}
		if !ValidValue(value) {
			return "", fmt.Errorf("segment %q: value must match [a-zA-Z0-9_.-]{1,128}", seg)
		}
		if idx == 0 && value != tenant {
			return "", fmt.Errorf("scope path must start with tenant:%s", tenant)
		}
		last = idx
		out = append(out, level+":"+strings.ToLower(value))
	}
	return strings.Join(out, "/"), nil
}

// LevelIndex is the position of level in Levels, or -1 for an unknown level.
func LevelIndex(level string) int { return slices.Index(Levels[:], level) }

// Leaf is the last segment of a scope path ("agent:bot").
func Leaf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[i+1:]
	}
	return path
}

// HasSegment reports whether path contains the exact segment "<level>:<value>"
// (value compared lowercased).
func HasSegment(path, level, value string) bool {
	want := level + ":" + strings.ToLower(value)
	for _, seg := range strings.Split(path, "/") {
		if seg == want {
			return true
		}
	}
	return false
}

// Within reports whether path equals prefix or lies below it.
func Within(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// UnitKey is the key form of a unit ("TOKENS"); "" for UNSPECIFIED or unknown.
func UnitKey(u cyclesv1.Unit) string { return enumkey.Of(u) }

// ParseUnit is the inverse of UnitKey.
func ParseUnit(s string) cyclesv1.Unit {
	return cyclesv1.Unit(cyclesv1.Unit_value["UNIT_"+s])
}

// AllUnits lists every unit in key form.
func AllUnits() []string {
	return []string{"USD_MICROCENTS", "TOKENS", "CREDITS", "RISK_POINTS"}
}

// PolicyKey is the key form of an overage policy ("ALLOW_IF_AVAILABLE"); ""
// for UNSPECIFIED or unknown.
func PolicyKey(p cyclesv1.CommitOveragePolicy) string { return enumkey.Of(p) }

// ParsePolicy is the inverse of PolicyKey.
func ParsePolicy(s string) cyclesv1.CommitOveragePolicy {
	return cyclesv1.CommitOveragePolicy(cyclesv1.CommitOveragePolicy_value["COMMIT_OVERAGE_POLICY_"+s])
}

// TenantOf is the tenant a scope path or prefix names in its first segment
// ("tenant:acme/workspace:eng" names acme); "" when it starts otherwise.
func TenantOf(path string) string {
	rest, ok := strings.CutPrefix(path, "tenant:")
	if !ok {
		return ""
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	return rest
}
