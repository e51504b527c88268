package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cyclesgo/cycles-go/pkg/script"
)

// The ledger mutations answer with a flat reply (lua/lib/ledger_snapshot.lua,
// docs/design.md#script-replies): after the executor's header, a replay flag,
// the script's extras, then the response snapshot's fields, amounts as
// decimal strings, '' for an absent field, lists as a count followed by
// their values. These readers take the fields straight into the response: no
// JSON on either side. A replay carries the very same fields, so it yields
// the very same response.

// result is what a mutation answers besides its snapshot.
type result struct {
	Replay  bool
	RemTTL  *num
	Denied  string
	Overage num
	Debt    num
}

// balanceRow is one balance of a snapshot (or of a Balances page).
type balanceRow struct {
	ScopePath      string `json:"scope_path"`
	Unit           string `json:"unit"`
	Remaining      num    `json:"remaining"`
	Reserved       num    `json:"reserved"`
	Spent          num    `json:"spent"`
	Allocated      num    `json:"allocated"`
	Debt           num    `json:"debt"`
	OverdraftLimit num    `json:"overdraft_limit"`
	IsOverLimit    bool   `json:"is_over_limit"`
}

// snapshot is the union of the response snapshots (reserve, dry run,
// decide, commit, release, extend, event).
type snapshot struct {
	Dry            bool
	Decision       string
	ReasonCode     string
	ReservationID  string
	Reserved       *num
	Unit           string
	ExpiresAtMs    num
	ScopePath      string
	Affected       []string
	Caps           string
	Balances       []balanceRow
	GraceMs        num
	Policy         string
	Charged        *num
	Released       *num
	DebtIncurred   num
	EventID        string
	ExtensionCount num
}

// flat reads the fields of one flat reply in order; the first malformed
// field sets err and every later read returns a zero value.
type flat struct {
	a   []any
	i   int
	err error
}

func (f *flat) fail(format string, args ...any) {
	if f.err == nil {
		f.err = fmt.Errorf("field %d: "+format, append([]any{f.i}, args...)...)
	}
}

func (f *flat) next() any {
	if f.err != nil {
		return nil
	}
	if f.i >= len(f.a) {
		f.fail("reply ends early (%d elements)", len(f.a))
		return nil
	}
	v := f.a[f.i]
	f.i++
	return v
}

func (f *flat) str() string {
	switch v := f.next().(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case nil:
		return ""
	default:
		f.fail("unexpected %T", v)
		return ""
	}
}

// int reads an int64 (a decimal string, ” = 0, or an integer reply).
func (f *flat) int() num {
	switch v := f.next().(type) {
	case int64:
		return num(v)
	case string:
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			f.fail("amount %q: %v", v, err)
		}
		return num(n)
	case nil:
		return 0
	default:
		f.fail("unexpected %T", v)
		return 0
	}
}

// opt reads an optional int64 (” = absent).
func (f *flat) opt() *num {
	if f.err == nil && f.i < len(f.a) {
		if s, ok := f.a[f.i].(string); ok && s == "" {
			f.i++
			return nil
		}
	}
	n := f.int()
	return &n
}

func (f *flat) flag() bool {
	switch v := f.next().(type) {
	case int64:
		return v != 0
	case string:
		return v == "1"
	default:
		return false
	}
}

// count reads a list length, bounded by what is left of the reply.
func (f *flat) count(per int) int {
	n := int(f.int())
	if n < 0 || n*per > len(f.a)-f.i {
		f.fail("list of %d entries does not fit the reply", n)
		return 0
	}
	return n
}

func (f *flat) strs() []string {
	n := f.count(1)
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = f.str()
	}
	return out
}

// balances reads a packed balance list: the scope paths, then one string of
// rows "i,remaining,reserved,spent,allocated,debt,overdraft_limit,over"
// joined by ';', i the row's path index (1-based).
func (f *flat) balances() []balanceRow {
	paths := f.strs()
	packed := f.str()
	if f.err != nil || packed == "" {
		return nil
	}
	out := make([]balanceRow, 0, strings.Count(packed, ";")+1)
	for row := range strings.SplitSeq(packed, ";") {
		var v [8]string
		n := 0
		for field := range strings.SplitSeq(row, ",") {
			if n == len(v) {
				n++
				break
			}
			v[n] = field
			n++
		}
		idx, err := strconv.Atoi(v[0])
		if n != len(v) || err != nil || idx < 1 || idx > len(paths) {
			f.fail("malformed balance row %q", row)
			return nil
		}
		b := balanceRow{ScopePath: paths[idx-1], IsOverLimit: v[7] == "1"}
		for i, dst := range []*num{&b.Remaining, &b.Reserved, &b.Spent, &b.Allocated, &b.Debt, &b.OverdraftLimit} {
			x, err := strconv.ParseInt(v[i+1], 10, 64)
			if err != nil {
				f.fail("balance row %q: %v", row, err)
				return nil
			}
			*dst = num(x)
		}
		out = append(out, b)
	}
	return out
}

// runFlat runs a ledger mutation and reads its replay flag and the script's
// extras (read by extras) and snapshot fields (read by fields).
func (l *Ledger) runFlat(ctx context.Context, name *script.Def, keys []string, args []any,
	extras func(*flat, *result), fields func(*flat, *snapshot)) (*result, *snapshot, error) {
	reply, err := l.exec.RunFlat(ctx, name, keys, args...)
	if err != nil {
		return nil, nil, err
	}
	f := &flat{a: reply, i: script.FlatFields}
	var r result
	var s snapshot
	r.Replay = f.flag()
	if extras != nil {
		extras(f, &r)
	}
	fields(f, &s)
	if f.err == nil && f.i != len(f.a) {
		f.fail("%d trailing elements", len(f.a)-f.i)
	}
	if f.err != nil {
		return nil, nil, fmt.Errorf("%s: decode reply: %w", name, f.err)
	}
	return &r, &s, nil
}

// Per script: the extras after the replay flag, then the snapshot fields
// (lua/lib/ledger_snapshot.lua lists them).

func reserveExtras(f *flat, r *result) {
	r.RemTTL = f.opt()
	r.Denied = f.str()
}

func reserveFields(f *flat, s *snapshot) {
	s.Dry = f.flag()
	s.Decision, s.ReasonCode, s.ReservationID = f.str(), f.str(), f.str()
	s.Reserved, s.Unit, s.ExpiresAtMs, s.ScopePath = f.opt(), f.str(), f.int(), f.str()
	s.GraceMs, s.Policy, s.Caps = f.int(), f.str(), f.str()
	s.Affected = f.strs()
	if s.Affected == nil && f.err == nil {
		// None listed: the scope path's prefixes (pkg/scope.Derive).
		s.Affected = scopePrefixes(s.ScopePath)
	}
	s.Balances = f.balances()
}

func commitExtras(f *flat, r *result) { r.Overage, r.Debt = f.int(), f.int() }

func commitFields(f *flat, s *snapshot) {
	s.Unit, s.Charged, s.Released, s.DebtIncurred = f.str(), f.opt(), f.opt(), f.int()
	s.Balances = f.balances()
}

func releaseFields(f *flat, s *snapshot) {
	s.Unit, s.Released = f.str(), f.opt()
	s.Balances = f.balances()
}

func extendExtras(f *flat, r *result) { r.RemTTL = f.opt() }

func extendFields(f *flat, s *snapshot) {
	s.Unit, s.ExpiresAtMs, s.ExtensionCount = f.str(), f.int(), f.int()
	s.Balances = f.balances()
}

func decideExtras(f *flat, r *result) { r.Denied = f.str() }

func decideFields(f *flat, s *snapshot) {
	s.Decision, s.ReasonCode, s.Caps = f.str(), f.str(), f.str()
	s.Affected = f.strs()
}

func eventExtras(f *flat, r *result) { r.Debt = f.int() }

func eventFields(f *flat, s *snapshot) {
	s.EventID, s.Unit, s.Charged, s.DebtIncurred = f.str(), f.str(), f.opt(), f.int()
	s.Balances = f.balances()
}
