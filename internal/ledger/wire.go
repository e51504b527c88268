package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/actionkind"
	"github.com/cyclesgo/cycles-go/internal/apierr"
	"github.com/cyclesgo/cycles-go/internal/scope"
)

// The read scripts (get, list, balances) answer in JSON with every amount and
// time as a decimal string (Lua numbers are doubles; cjson prints 14
// significant digits). These types decode them exactly, and tolerate cjson's
// "{}" for an empty array. (The mutations answer flat: reply.go.)

// num is an int64 carried as a JSON string (or, tolerated, a bare integer).
type num int64

func (n *num) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		*n = 0
		return nil
	}
	if b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	if len(b) == 0 {
		*n = 0
		return nil
	}
	v, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("amount %q: %w", b, err)
	}
	*n = num(v)
	return nil
}

func amount(unit cyclesv1.Unit, v num) *cyclesv1.Amount {
	return &cyclesv1.Amount{Unit: unit, Amount: int64(v)}
}

// optAmount is amount for an optional reply value: nil when the reply has none.
func optAmount(unit cyclesv1.Unit, v *num) *cyclesv1.Amount {
	if v == nil {
		return nil
	}
	return amount(unit, *v)
}

// balances converts snapshot balances; unit is the reservation/request unit
// unless the row names its own (GetBalances).
func balances(unit cyclesv1.Unit, in []balanceRow) []*cyclesv1.Balance {
	if len(in) == 0 {
		return nil
	}
	// The messages of all rows come from one slice per type (3 allocations
	// instead of 7 per row; a reserve answers one row per affected scope).
	out := make([]*cyclesv1.Balance, len(in))
	rows := make([]cyclesv1.Balance, len(in))
	rems := make([]cyclesv1.SignedAmount, len(in))
	amts := make([]cyclesv1.Amount, 5*len(in))
	for i, b := range in {
		u := unit
		if b.Unit != "" {
			u = scope.ParseUnit(b.Unit)
		}
		a := amts[5*i : 5*i+5]
		for j, v := range [5]num{b.Reserved, b.Spent, b.Allocated, b.Debt, b.OverdraftLimit} {
			a[j].Unit, a[j].Amount = u, int64(v)
		}
		rems[i].Unit, rems[i].Amount = u, int64(b.Remaining)
		r := &rows[i]
		r.Scope, r.ScopePath = scope.Leaf(b.ScopePath), b.ScopePath
		r.Remaining, r.Reserved, r.Spent, r.Allocated, r.Debt, r.OverdraftLimit = &rems[i], &a[0], &a[1], &a[2], &a[3], &a[4]
		r.IsOverLimit = b.IsOverLimit
		out[i] = r
	}
	return out
}

func decision(s string) cyclesv1.Decision {
	return cyclesv1.Decision(cyclesv1.Decision_value["DECISION_"+s])
}

// capsAndDenial decodes the two JSON members a reserve and a decide answer
// share: the caps and the deny detail.
func capsAndDenial(capsJSON, denyJSON string) (*cyclesv1.Caps, *cyclesv1.DenyDetail, error) {
	caps, err := parseCaps(capsJSON)
	if err != nil {
		return nil, nil, err
	}
	dd, err := actionkind.ParseDenyDetail(denyJSON)
	if err != nil {
		return nil, nil, err
	}
	return caps, dd, nil
}

// parseCaps decodes a budget's caps (validated as JSON by the script).
func parseCaps(s string) (*cyclesv1.Caps, error) {
	if s == "" {
		return nil, nil
	}
	var c cyclesv1.Caps
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(s), &c); err != nil {
		return nil, apierr.New(apierr.InternalError, "budget caps are malformed: %v", err)
	}
	return &c, nil
}

// structOf decodes stored metadata ("" = none).
func structOf(s string) (*structpb.Struct, error) {
	if s == "" {
		return nil, nil
	}
	var st structpb.Struct
	if err := protojson.Unmarshal([]byte(s), &st); err != nil {
		return nil, err
	}
	return &st, nil
}
