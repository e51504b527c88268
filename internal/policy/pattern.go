package policy

import (
	"fmt"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/scope"
)

// Compile checks a scope pattern of tenant's policy and returns its canonical
// form (values lowercased, as scope paths are) and the Lua pattern the reserve
// and decide scripts match scope paths with (lua/lib/policy.lua).
//
// A pattern is '/'-separated segments, matched against the reservation's
// scope path (docs/protocol.md#policies):
//   - "<level>:<value>" matches that one segment; "<level>:*" any value of
//     that level. Levels appear at most once, in canonical order.
//   - A pattern starting with a tenant segment is anchored at the root
//     ("tenant:acme" is exactly the tenant scope); one starting with another
//     level, or with "*/", matches the scope path's trailing segments
//     ("agent:*" and "*/agent:*": any scope whose deepest segment is an agent).
//   - A trailing "/*" matches one or more further segments: the scopes below.
//   - "*" alone matches every scope of the tenant.
//
// The tenant segment, when present, must name tenant (or be "tenant:*"): a
// policy never reaches another tenant's scopes, which live in another hash
// slot anyway.
func Compile(tenant, pattern string) (canonical, lua string, err error) {
	if pattern == "*" {
		return "*", ".", nil
	}
	segs := strings.Split(pattern, "/")
	lead, trail := false, false
	if segs[0] == "*" {
		lead, segs = true, segs[1:]
	}
	if len(segs) > 0 && segs[len(segs)-1] == "*" {
		trail, segs = true, segs[:len(segs)-1]
	}
	if len(segs) == 0 {
		return "", "", fmt.Errorf("needs at least one <level>:<value> segment besides '*'")
	}
	out := make([]string, len(segs))
	var lp strings.Builder
	last := -1
	for i, seg := range segs {
		level, value, ok := strings.Cut(seg, ":")
		if !ok {
			return "", "", fmt.Errorf("segment %q: want <level>:<value>, <level>:* or a leading/trailing *", seg)
		}
		idx := scope.LevelIndex(level)
		if idx < 0 {
			return "", "", fmt.Errorf("segment %q: unknown level %q", seg, level)
		}
		if idx <= last {
			return "", "", fmt.Errorf("segment %q: levels must be unique and in the order %s", seg, strings.Join(scope.Levels[:], ", "))
		}
		last = idx
		if idx == 0 {
			if lead {
				return "", "", fmt.Errorf("segment %q: the tenant is the root; nothing comes before it", seg)
			}
			if value != "*" && value != tenant {
				return "", "", fmt.Errorf("segment %q: a policy of tenant %s can only match tenant:%s", seg, tenant, tenant)
			}
		}
		if value != "*" {
			if !scope.ValidValue(value) {
				return "", "", fmt.Errorf("segment %q: value must be * or match [a-zA-Z0-9_.-]{1,128}", seg)
			}
			value = strings.ToLower(value)
		}
		out[i] = level + ":" + value
		switch {
		case i > 0:
			lp.WriteByte('/')
		case idx == 0:
			lp.WriteByte('^')
		default:
			// Not the root: the match starts at a segment boundary (the tenant
			// segment always comes first, so every other one follows a '/').
			lp.WriteByte('/')
		}
		lp.WriteString(level)
		lp.WriteByte(':')
		if value == "*" {
			lp.WriteString("[^/]+")
		} else {
			lp.WriteString(luaEscape(value))
		}
	}
	if trail {
		lp.WriteString("/.+")
	}
	lp.WriteByte('$')
	canonical = strings.Join(out, "/")
	if lead {
		canonical = "*/" + canonical
	}
	if trail {
		canonical += "/*"
	}
	return canonical, lp.String(), nil
}

// luaEscape quotes the Lua pattern magic characters a scope value can hold
// ('.' and '-'; the others are outside [a-z0-9_.-]).
func luaEscape(v string) string {
	if !strings.ContainsAny(v, ".-") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '.' || v[i] == '-' {
			b.WriteByte('%')
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
