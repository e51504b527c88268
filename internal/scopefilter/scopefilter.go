// Package scopefilter is the one definition of an API key's scope filter
// (docs/protocol.md#scope-filters): which patterns a filter may hold, which
// scope a request names, and whether a filter lets a key name it.
//
// A filter is a list of patterns; a key with an empty filter may name every
// scope of its tenant. A pattern is '/'-separated "<level>:<value>" or
// "<level>:*" segments, levels at most once and in canonical order
// (tenant, workspace, app, workflow, agent, toolset). A scope lies within a
// pattern when the scope path contains every segment of the pattern ("*": any
// value of that level), so "workspace:eng" admits tenant:acme/workspace:eng
// and everything below it, and "agent:*" every scope that names an agent.
// Everything below a scope within a pattern is within it too, which is what
// makes the check on a list's filter enough: every record such a list returns
// lies below the scope its filter names.
//
// Which requests name which scope is Named, here, and the check runs once, in
// the auth chain (internal/server), for both wires.
package scopefilter

import (
	"fmt"
	"strings"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Bounds of a stored filter: a stranger with an admin mistake cannot make
// every call of a key scan a huge list.
const (
	MaxPatterns   = 32
	MaxPatternLen = 512
)

// Check validates a requested filter of tenant's key and returns it in
// canonical form (values lowercased); on error, the index of the offending
// pattern. A tenant segment must name tenant (or be "tenant:*").
func Check(tenant string, patterns []string) ([]string, int, error) {
	if len(patterns) > MaxPatterns {
		return nil, MaxPatterns, fmt.Errorf("at most %d patterns", MaxPatterns)
	}
	out := make([]string, 0, len(patterns))
	for i, p := range patterns {
		c, err := canonical(tenant, p)
		if err != nil {
			return nil, i, err
		}
		for _, prev := range out {
			if prev == c {
				return nil, i, fmt.Errorf("%q is listed twice", p)
			}
		}
		out = append(out, c)
	}
	return out, 0, nil
}

func canonical(tenant, p string) (string, error) {
	if p == "" || len(p) > MaxPatternLen {
		return "", fmt.Errorf("a pattern has 1..%d characters", MaxPatternLen)
	}
	segs := strings.Split(p, "/")
	last := -1
	for i, seg := range segs {
		level, value, ok := strings.Cut(seg, ":")
		if !ok {
			return "", fmt.Errorf("segment %q: want <level>:<value> or <level>:*", seg)
		}
		idx := scope.LevelIndex(level)
		if idx < 0 {
			return "", fmt.Errorf("segment %q: unknown level %q (one of %s)", seg, level, strings.Join(scope.Levels[:], ", "))
		}
		if idx <= last {
			return "", fmt.Errorf("segment %q: levels must be unique and in the order %s", seg, strings.Join(scope.Levels[:], ", "))
		}
		last = idx
		if value == "*" {
			continue
		}
		if !scope.ValidValue(value) {
			return "", fmt.Errorf("segment %q: value must be * or match [a-zA-Z0-9_.-]{1,128}", seg)
		}
		value = strings.ToLower(value)
		if idx == 0 && value != tenant {
			return "", fmt.Errorf("segment %q: a key of tenant %s can only name tenant:%s", seg, tenant, tenant)
		}
		segs[i] = level + ":" + value
	}
	return strings.Join(segs, "/"), nil
}

// Segments is what a request names: one value per level ("" = not named),
// in canonical order. The tenant is always the key's.
type Segments [len(scope.Levels)]string

// Path is the canonical form of the named segments, for messages.
func (s Segments) Path() string {
	var b strings.Builder
	for i, v := range s {
		if v == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(scope.Levels[i] + ":" + v)
	}
	return b.String()
}

// Allows reports whether a key whose filter is filter (canonical patterns)
// may name segs: the filter is empty, or segs contain every segment of one
// of its patterns.
func Allows(filter []string, segs Segments) bool {
	if len(filter) == 0 {
		return true
	}
	for _, p := range filter {
		if within(p, segs) {
			return true
		}
	}
	return false
}

func within(pattern string, segs Segments) bool {
	for _, seg := range strings.Split(pattern, "/") {
		level, value, _ := strings.Cut(seg, ":")
		idx := scope.LevelIndex(level)
		if idx < 0 || segs[idx] == "" || value != "*" && segs[idx] != value {
			return false
		}
	}
	return true
}

// fromValues builds the segments of the standard subject fields (index 0,
// the tenant, is replaced by tenant).
func fromValues(tenant string, vals [6]string) Segments {
	var s Segments
	s[0] = tenant
	for i := 1; i < len(vals); i++ {
		s[i] = strings.ToLower(vals[i])
	}
	return s
}

// fromPath builds the segments of a scope path or scope prefix
// ("tenant:acme/workspace:eng"); a segment it cannot read is left out, which
// only ever narrows what the request is taken to name.
func fromPath(tenant, path string) Segments {
	var s Segments
	s[0] = tenant
	if path == "" {
		return s
	}
	for _, seg := range strings.Split(path, "/") {
		level, value, ok := strings.Cut(seg, ":")
		if idx := scope.LevelIndex(level); ok && idx > 0 && value != "" {
			s[idx] = strings.ToLower(value)
		}
	}
	return s
}

// subjectRequest, filterRequest and prefixRequest are the request shapes that
// name a scope: a subject (reserve, decide, events), the subject fields of a
// list filter (balances, reservations), or a scope prefix (the event log).
type (
	subjectRequest interface{ GetSubject() *cyclesv1.Subject }
	filterRequest  interface {
		GetWorkspace() string
		GetApp() string
		GetWorkflow() string
		GetAgent() string
		GetToolset() string
	}
	prefixRequest interface{ GetScopePrefix() string }
)

// Named returns the scope req names for a key of tenant, and the request
// field that names it; ok is false for a request that names no scope.
func Named(tenant string, req any) (segs Segments, field string, ok bool) {
	switch r := req.(type) {
	case subjectRequest:
		return fromValues(tenant, scope.SubjectValues(r.GetSubject())), "subject", true
	case filterRequest:
		return fromValues(tenant, [6]string{"", r.GetWorkspace(), r.GetApp(), r.GetWorkflow(), r.GetAgent(), r.GetToolset()}), "workspace", true
	case prefixRequest:
		return fromPath(tenant, r.GetScopePrefix()), "scope_prefix", true
	}
	return Segments{}, "", false
}

// Answered returns the scope a response reveals (one reservation read by
// id); ok is false for any other response.
func Answered(tenant string, resp any) (segs Segments, ok bool) {
	if r, is := resp.(interface {
		GetReservation() *cyclesv1.Reservation
	}); is && r.GetReservation() != nil {
		return fromPath(tenant, r.GetReservation().GetScopePath()), true
	}
	return Segments{}, false
}

// Refusal is the PERMISSION_DENIED / 403 of a scope outside the filter,
// naming the request field, the scope and the reason.
func Refusal(field string, segs Segments) error {
	return (&apierr.Error{
		Code:    apierr.Forbidden,
		Message: "scope " + segs.Path() + " is outside this API key's scope_filter",
	}).With("reason", "scope_filter").With("field", field).With("scope", segs.Path())
}
