package keys

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// BalanceField is the budget hash field that holds the whole balance, packed
// (Balance.Pack). The ledger scripts read it with one HGET and split it with
// one pattern match (lua/lib/core.lua BAL), and every script that changes an
// amount, the over-limit flag or the status rewrites it whole.
const BalanceField = "bal"

// Balance is a budget's balance as stored in BalanceField:
//
//	<status>:<remaining>:<reserved>:<spent>:<allocated>:<debt>:<overdraft_limit>:<over>
//
// status ACTIVE|FROZEN|CLOSED, the six amounts canonical int64 decimal
// strings, over "1" (is_over_limit) or "0". Example: "ACTIVE:900:100:0:1000:0:0:0".
type Balance struct {
	Status         string
	Remaining      int64
	Reserved       int64
	Spent          int64
	Allocated      int64
	Debt           int64
	OverdraftLimit int64
	OverLimit      bool
}

// balanceStatuses are the statuses a stored balance may carry.
var balanceStatuses = map[string]bool{"ACTIVE": true, "FROZEN": true, "CLOSED": true}

// ErrBalance is the cause of every ParseBalance refusal.
var ErrBalance = errors.New("malformed budget balance")

// Pack is the stored form of b (what the Lua BAL.pack writes for the same values).
func (b Balance) Pack() string {
	over := "0"
	if b.OverLimit {
		over = "1"
	}
	return strings.Join([]string{b.Status,
		strconv.FormatInt(b.Remaining, 10), strconv.FormatInt(b.Reserved, 10), strconv.FormatInt(b.Spent, 10),
		strconv.FormatInt(b.Allocated, 10), strconv.FormatInt(b.Debt, 10), strconv.FormatInt(b.OverdraftLimit, 10),
		over}, ":")
}

// ParseBalance reads a stored balance as strictly as the ledger scripts do:
// eight parts, a known status, canonical int64 amounts (no sign but '-', no
// leading zero, no "-0") and a 0|1 flag; anything else is ErrBalance.
func ParseBalance(s string) (Balance, error) {
	p := strings.Split(s, ":")
	if len(p) != 8 {
		return Balance{}, fmt.Errorf("%w: %d parts in %q", ErrBalance, len(p), s)
	}
	var b Balance
	if !balanceStatuses[p[0]] {
		return Balance{}, fmt.Errorf("%w: status %q", ErrBalance, p[0])
	}
	b.Status = p[0]
	dst := []*int64{&b.Remaining, &b.Reserved, &b.Spent, &b.Allocated, &b.Debt, &b.OverdraftLimit}
	for i, d := range dst {
		n, err := strconv.ParseInt(p[i+1], 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != p[i+1] {
			return Balance{}, fmt.Errorf("%w: amount %q is not a canonical int64", ErrBalance, p[i+1])
		}
		*d = n
	}
	switch p[7] {
	case "1":
		b.OverLimit = true
	case "0":
	default:
		return Balance{}, fmt.Errorf("%w: over-limit flag %q", ErrBalance, p[7])
	}
	return b, nil
}
