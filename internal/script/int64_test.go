package script

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"math/rand"
	"strconv"
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// int64Probe applies one int64.lua operation to ARGV[2], ARGV[3].
const int64Probe = `
local op, a, b = ARGV[1], ARGV[2], ARGV[3]
local r
if op == 'norm' then r = i64_norm(a)
elseif op == 'add' then r = i64_add(a, b)
elseif op == 'sub' then r = i64_sub(a, b)
elseif op == 'cmp' then r = tostring(i64_cmp(a, b))
elseif op == 'min' then r = i64_min(a, b)
elseif op == 'max' then r = i64_max(a, b)
elseif op == 'addsat' then r = i64_add_sat(a, b)
end
if r == nil then return ok({r = false}) end
return ok({r = r})
`

var (
	minI64 = big.NewInt(math.MinInt64)
	maxI64 = big.NewInt(math.MaxInt64)
)

func fits(x *big.Int) bool { return x.Cmp(minI64) >= 0 && x.Cmp(maxI64) <= 0 }

func expect(op string, a, b *big.Int) (string, bool) {
	r := new(big.Int)
	switch op {
	case "add", "addsat":
		r.Add(a, b)
		if op == "addsat" && !fits(r) {
			if r.Sign() > 0 {
				return maxI64.String(), true
			}
			return minI64.String(), true
		}
	case "sub":
		r.Sub(a, b)
	case "cmp":
		return strconv.Itoa(a.Cmp(b)), true
	case "min":
		if a.Cmp(b) <= 0 {
			return a.String(), true
		}
		return b.String(), true
	case "max":
		if a.Cmp(b) >= 0 {
			return a.String(), true
		}
		return b.String(), true
	}
	if !fits(r) {
		return "", false
	}
	return r.String(), true
}

func interesting() []*big.Int {
	two53 := new(big.Int).Lsh(big.NewInt(1), 53)
	vals := []*big.Int{
		big.NewInt(0), big.NewInt(1), big.NewInt(-1), big.NewInt(999_999_999_999_999),
		big.NewInt(1_000_000_000_000_000), big.NewInt(-999_999_999_999_999), big.NewInt(9_999_999),
		big.NewInt(10_000_000), new(big.Int).Set(two53), new(big.Int).Add(two53, big.NewInt(1)),
		new(big.Int).Neg(new(big.Int).Add(two53, big.NewInt(1))), maxI64, minI64,
		new(big.Int).Sub(maxI64, big.NewInt(1)), new(big.Int).Add(minI64, big.NewInt(1)),
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 40; i++ {
		v := big.NewInt(rng.Int63() >> uint(rng.Intn(63)))
		if rng.Intn(2) == 0 {
			v.Neg(v)
		}
		vals = append(vals, v)
	}
	return vals
}

func TestInt64LibraryMatchesBigInt(t *testing.T) {
	for _, be := range redistest.AllModes(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := probeExec(t, be.Client, map[string]string{"test/int64": int64Probe}, modeOf(be)...)
			ctx := context.Background()
			run := func(op, a, b string) (string, bool) {
				raw, err := ex.Run(ctx, def("test/int64"), nil, op, a, b)
				if err != nil {
					t.Fatalf("%s(%s,%s): %v", op, a, b, err)
				}
				var out struct{ R any }
				if err := json.Unmarshal(raw, &out); err != nil {
					t.Fatal(err)
				}
				s, ok := out.R.(string)
				return s, ok
			}
			vals := interesting()
			for _, op := range []string{"add", "sub", "cmp", "min", "max", "addsat"} {
				for i, a := range vals {
					for j, b := range vals {
						if (i*len(vals)+j)%3 != 0 && i > 15 && j > 15 {
							continue // keep the random x random part small
						}
						want, wantOK := expect(op, a, b)
						got, gotOK := run(op, a.String(), b.String())
						if gotOK != wantOK || got != want {
							t.Fatalf("%s(%s, %s) = %q (ok=%v), want %q (ok=%v)", op, a, b, got, gotOK, want, wantOK)
						}
					}
				}
			}
		})
	}
}

func TestInt64Norm(t *testing.T) {
	ex := probeExec(t, redistest.Embedded(t), map[string]string{"test/int64": int64Probe})
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"0", "0", true}, {"-0", "0", true}, {"007", "7", true}, {"-007", "-7", true},
		{"9223372036854775807", "9223372036854775807", true},
		{"9223372036854775808", "", false},
		{"-9223372036854775808", "-9223372036854775808", true},
		{"-9223372036854775809", "", false},
		{"1.5", "", false}, {"", "", false}, {"1e3", "", false}, {" 1", "", false}, {"+1", "", false},
	}
	for _, c := range cases {
		raw, err := ex.Run(context.Background(), def("test/int64"), nil, "norm", c.in, "0")
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ R any }
		_ = json.Unmarshal(raw, &out)
		s, ok := out.R.(string)
		if ok != c.ok || s != c.want {
			t.Errorf("norm(%q) = %q,%v want %q,%v", c.in, s, ok, c.want, c.ok)
		}
	}
}
