package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/script"
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
	// DenyDetail is the v0.1.26 DenyDetail JSON of a DENY ('' when none or
	// stored before it existed); Observed marks an observe-mode answer.
	DenyDetail string
	Observed   bool
}

// flat reads a ledger mutation's flat reply (script.FlatReader) with the
// ledger's amount type and its packed balance lists.
type flat struct{ *script.FlatReader }

// int reads an amount (an integer reply or a decimal string, an empty string is 0).
func (f flat) int() num { return num(f.Int()) }

// opt reads an optional amount (an empty string is absent).
func (f flat) opt() *num {
	v, ok := f.Opt()
	if !ok {
		return nil
	}
	n := num(v)
	return &n
}

// balances reads a packed balance list: the scope paths, then one string of
// rows "i,remaining,reserved,spent,allocated,debt,overdraft_limit,over"
// joined by ';', i the row's path index (1-based).
func (f flat) balances() []balanceRow {
	paths := f.Strs()
	packed := f.Str()
	if f.Err() != nil || packed == "" {
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
			f.Fail("malformed balance row %q", row)
			return nil
		}
		b := balanceRow{ScopePath: paths[idx-1], IsOverLimit: v[7] == "1"}
		for i, dst := range []*num{&b.Remaining, &b.Reserved, &b.Spent, &b.Allocated, &b.Debt, &b.OverdraftLimit} {
			x, err := strconv.ParseInt(v[i+1], 10, 64)
			if err != nil {
				f.Fail("balance row %q: %v", row, err)
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
func runFlat[K, A any](ctx context.Context, l *Ledger, sc *script.Script[K, A], k K, a A,
	extras func(flat, *result), fields func(flat, *snapshot)) (*result, *snapshot, error) {
	reply, err := sc.RunFlat(ctx, l.exec, k, a)
	if err != nil {
		return nil, nil, err
	}
	return readFlat(sc.Def, reply, extras, fields)
}

// readFlat reads a mutation's flat reply: the replay flag, the script's
// extras (read by extras) and snapshot fields (read by fields).
func readFlat(name *script.Def, reply []any, extras func(flat, *result), fields func(flat, *snapshot)) (*result, *snapshot, error) {
	f := flat{script.NewFlatReader(reply)}
	var r result
	var s snapshot
	r.Replay = f.Flag()
	if extras != nil {
		extras(f, &r)
	}
	fields(f, &s)
	if err := f.End(); err != nil {
		return nil, nil, fmt.Errorf("%s: decode reply: %w", name, err)
	}
	return &r, &s, nil
}

// Per script: the extras after the replay flag, then the snapshot fields
// (lua/lib/ledger_snapshot.lua lists them).

func reserveExtras(f flat, r *result) {
	r.RemTTL = f.opt()
	r.Denied = f.Str()
}

func reserveFields(f flat, s *snapshot) {
	s.Dry = f.Flag()
	s.Decision, s.ReasonCode, s.ReservationID = f.Str(), f.Str(), f.Str()
	s.Reserved, s.Unit, s.ExpiresAtMs, s.ScopePath = f.opt(), f.Str(), f.int(), f.Str()
	s.GraceMs, s.Policy, s.Caps = f.int(), f.Str(), f.Str()
	s.Affected = f.Strs()
	if s.Affected == nil && f.Err() == nil {
		// None listed: the scope path's prefixes (internal/scope.Derive).
		s.Affected = scopePrefixes(s.ScopePath)
	}
	s.Balances = f.balances()
	if f.More() {
		s.DenyDetail, s.Observed = f.Str(), f.Str() == "1"
	}
}

func commitExtras(f flat, r *result) { r.Overage, r.Debt = f.int(), f.int() }

func commitFields(f flat, s *snapshot) {
	s.Unit, s.Charged, s.Released, s.DebtIncurred = f.Str(), f.opt(), f.opt(), f.int()
	s.Balances = f.balances()
}

func releaseFields(f flat, s *snapshot) {
	s.Unit, s.Released = f.Str(), f.opt()
	s.Balances = f.balances()
}

func extendExtras(f flat, r *result) { r.RemTTL = f.opt() }

func extendFields(f flat, s *snapshot) {
	s.Unit, s.ExpiresAtMs, s.ExtensionCount = f.Str(), f.int(), f.int()
	s.Balances = f.balances()
}

func decideExtras(f flat, r *result) { r.Denied = f.Str() }

func decideFields(f flat, s *snapshot) {
	s.Decision, s.ReasonCode, s.Caps = f.Str(), f.Str(), f.Str()
	s.Affected = f.Strs()
	if f.More() {
		s.DenyDetail = f.Str()
	}
}

func eventExtras(f flat, r *result) { r.Debt = f.int() }

func eventFields(f flat, s *snapshot) {
	s.EventID, s.Unit, s.Charged, s.DebtIncurred = f.Str(), f.Str(), f.opt(), f.int()
	s.Balances = f.balances()
}
