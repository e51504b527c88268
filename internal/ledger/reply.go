package ledger

import (
	"context"
	"strconv"
	"strings"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// The ledger mutations answer with a flat reply (lua/lib/ledger_snapshot.lua,
// docs/design.md#script-replies): after the executor's header, a replay flag,
// the script's extras (what only the live call knows), then the response's
// fields, amounts as decimal strings, '' for an absent field, lists as a
// count followed by their values. A replay carries the very same response
// fields, so it yields the very same response.
//
// Each reply's layout is declared once, here, as a struct whose `flat` tags
// name its fields in order (script.ReplyOf): it is the Go reader, the list
// TestReplyLayoutsMatchLua compares with the layouts ledger_snapshot.lua
// declares, and the source of docs/design.md's reply table
// (TestDesignDocReplyTable). No code reads these replies by position.

type reserveReply struct {
	Replay        bool        `flat:"replay,extra"`
	RemTTL        *num        `flat:"rem_ttl,extra"` // live only
	Denied        string      `flat:"denied,extra"`  // a dry-run or observed DENY's reason
	Dry           bool        `flat:"dry"`
	Decision      string      `flat:"decision"`
	ReasonCode    string      `flat:"reason_code"`
	ReservationID string      `flat:"reservation_id"`
	Reserved      *num        `flat:"reserved"`
	Unit          string      `flat:"unit"`
	ExpiresAtMs   num         `flat:"expires_at_ms"`
	ScopePath     string      `flat:"scope_path"`
	GraceMs       num         `flat:"grace_ms"`
	Policy        string      `flat:"policy"`
	Caps          string      `flat:"caps"`
	Affected      []string    `flat:"affected"` // none: the scope path's prefixes
	Balances      balanceList `flat:"balances"`
	// DenyDetail (v0.1.26 DenyDetail JSON, '' when none) and Observed end
	// DENY and observed answers; other answers end at the balances.
	DenyDetail string `flat:"deny_detail,trailing"`
	Observed   bool   `flat:"observed,trailing"`
}

type decideReply struct {
	Replay     bool     `flat:"replay,extra"`
	Denied     string   `flat:"denied,extra"`
	Decision   string   `flat:"decision"`
	ReasonCode string   `flat:"reason_code"`
	Caps       string   `flat:"caps"`
	Affected   []string `flat:"affected"`
	DenyDetail string   `flat:"deny_detail,trailing"`
}

type commitReply struct {
	Replay       bool        `flat:"replay,extra"`
	Overage      num         `flat:"overage,extra"`
	Debt         num         `flat:"debt,extra"`
	Unit         string      `flat:"unit"`
	Charged      *num        `flat:"charged"`
	Released     *num        `flat:"released"`
	DebtIncurred num         `flat:"debt_incurred"`
	Balances     balanceList `flat:"balances"`
}

type releaseReply struct {
	Replay   bool        `flat:"replay,extra"`
	Unit     string      `flat:"unit"`
	Released *num        `flat:"released"`
	Balances balanceList `flat:"balances"`
}

type extendReply struct {
	Replay         bool        `flat:"replay,extra"`
	RemTTL         *num        `flat:"rem_ttl,extra"`
	Unit           string      `flat:"unit"`
	ExpiresAtMs    num         `flat:"expires_at_ms"`
	ExtensionCount num         `flat:"extension_count"`
	Balances       balanceList `flat:"balances"`
}

type eventReply struct {
	Replay       bool        `flat:"replay,extra"`
	Debt         num         `flat:"debt,extra"`
	EventID      string      `flat:"event_id"`
	Unit         string      `flat:"unit"`
	Charged      *num        `flat:"charged"`
	DebtIncurred num         `flat:"debt_incurred"`
	Balances     balanceList `flat:"balances"`
}

var (
	replyReserve = script.ReplyOf[reserveReply]("ledger/reserve")
	replyDecide  = script.ReplyOf[decideReply]("ledger/decide")
	replyCommit  = script.ReplyOf[commitReply]("ledger/commit")
	replyRelease = script.ReplyOf[releaseReply]("ledger/release")
	replyExtend  = script.ReplyOf[extendReply]("ledger/extend")
	replyEvent   = script.ReplyOf[eventReply]("ledger/event")
)

// balanceRow is one balance of a reply (or of a Balances page).
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

// balanceList is a reply's packed balance list: the scope paths (a counted
// list), then one string of rows
// "i,remaining,reserved,spent,allocated,debt,overdraft_limit,over" joined by
// ';', i the row's path index (1-based).
type balanceList []balanceRow

// ReadFlat reads a packed balance list (script.FlatValue).
func (b *balanceList) ReadFlat(f *script.FlatReader) {
	paths := f.Strs()
	packed := f.Str()
	if f.Err() != nil || packed == "" {
		return
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
			return
		}
		r := balanceRow{ScopePath: paths[idx-1], IsOverLimit: v[7] == "1"}
		for i, dst := range []*num{&r.Remaining, &r.Reserved, &r.Spent, &r.Allocated, &r.Debt, &r.OverdraftLimit} {
			x, err := strconv.ParseInt(v[i+1], 10, 64)
			if err != nil {
				f.Fail("balance row %q: %v", row, err)
				return
			}
			*dst = num(x)
		}
		out = append(out, r)
	}
	*b = out
}

// runFlat runs a ledger mutation and reads its reply with its layout.
func runFlat[K, A, R any](ctx context.Context, l *Ledger, sc *script.Script[K, A], layout *script.ReplyLayout[R],
	k K, a A) (*R, error) {
	reply, err := sc.RunFlat(ctx, l.exec, k, a)
	if err != nil {
		return nil, err
	}
	return layout.Read(reply)
}

// affected are the reserve's affected scopes: none listed means the scope
// path's prefixes (internal/scope.Derive).
func (r *reserveReply) affected() []string {
	if r.Affected == nil {
		return keys.ScopePrefixes(r.ScopePath)
	}
	return r.Affected
}
