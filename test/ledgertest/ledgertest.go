// Package ledgertest seeds ledger state directly (tenant and budget hashes as
// internal/keys/records.go lays them out, without the admin plane) and checks the
// ledger invariants. Every suite that moves money calls CheckInvariants after
// each scenario:
//
//   - every budget: remaining = allocated - spent - reserved - debt (exact,
//     math/big on the stored strings) and reserved >= 0;
//   - every ACTIVE reservation is in the deadline index, scored exactly
//     expires_at + grace_ms, and every index entry is an ACTIVE record;
//   - per budget, the estimates of the ACTIVE reservations that hold it sum
//     to its reserved;
//   - every reservation record holds only fields keys.ReservationLayout
//     lists (the layout's one definition).
package ledgertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
)

// MaxInt64 is 2^63-1 as a decimal string.
const MaxInt64 = "9223372036854775807"

// NewTenantID returns a fresh tenant id, so tests sharing one Redis server
// never see each other's keys.
func NewTenantID(tb testing.TB) string {
	tb.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		tb.Fatal(err)
	}
	return "lt-" + hex.EncodeToString(b[:])
}

// Tenant is a tenant record to seed. Zero values are left out of the hash
// (so the scripts' defaults apply).
type Tenant struct {
	Status        string // ACTIVE (default), SUSPENDED, CLOSED, or anything (malformed)
	DefaultPolicy string // REJECT | ALLOW_IF_AVAILABLE | ALLOW_WITH_OVERDRAFT
	DefaultTTLms  int64
	MaxTTLms      int64
	MaxExtensions *int
	// Extra fields written verbatim (overrides).
	Extra map[string]string
}

// SeedTenant writes the tenant record and registers the tenant.
func SeedTenant(tb testing.TB, c redis.UniversalClient, id string, tn Tenant) {
	tb.Helper()
	ctx := context.Background()
	status := tn.Status
	if status == "" {
		status = "ACTIVE"
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	f := map[string]any{"tenant_id": id, "name": id, "status": status, "created_at": now, "updated_at": now}
	if tn.DefaultPolicy != "" {
		f["default_policy"] = tn.DefaultPolicy
	}
	if tn.DefaultTTLms != 0 {
		f["default_ttl_ms"] = strconv.FormatInt(tn.DefaultTTLms, 10)
	}
	if tn.MaxTTLms != 0 {
		f["max_ttl_ms"] = strconv.FormatInt(tn.MaxTTLms, 10)
	}
	if tn.MaxExtensions != nil {
		f["max_extensions"] = strconv.Itoa(*tn.MaxExtensions)
	}
	for k, v := range tn.Extra {
		f[k] = v
	}
	t := keys.Tenant(id)
	if err := c.HSet(ctx, t.Record(), f).Err(); err != nil {
		tb.Fatalf("seed tenant %s: %v", id, err)
	}
	if err := c.ZAdd(ctx, keys.Tenants, redis.Z{Member: id}).Err(); err != nil {
		tb.Fatalf("register tenant %s: %v", id, err)
	}
}

// SetTenantStatus flips a seeded tenant's status.
func SetTenantStatus(tb testing.TB, c redis.UniversalClient, id, status string) {
	tb.Helper()
	if err := c.HSet(context.Background(), keys.Tenant(id).Record(), "status", status).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Budget is a budget hash to seed. Remaining is derived from the invariant
// unless RemainingOverride is set (to seed a deliberately broken ledger).
type Budget struct {
	Scope          string // canonical scope path, e.g. "tenant:t1/workspace:prod"
	Unit           string // TOKENS, USD_MICROCENTS, ...
	Allocated      int64
	Reserved       int64
	Spent          int64
	Debt           int64
	OverdraftLimit int64
	IsOverLimit    bool
	Status         string // ACTIVE (default), FROZEN, CLOSED
	Caps           string // JSON Caps, "" = none
	// RemainingOverride replaces the derived remaining (decimal string).
	RemainingOverride string
	// Extra fields written verbatim after everything else.
	Extra map[string]string
}

// SeedBudget writes the budget hash and its budgets-index member.
func SeedBudget(tb testing.TB, c redis.UniversalClient, tenant string, b Budget) {
	tb.Helper()
	ctx := context.Background()
	rem := new(big.Int).SetInt64(b.Allocated)
	rem.Sub(rem, big.NewInt(b.Spent))
	rem.Sub(rem, big.NewInt(b.Reserved))
	rem.Sub(rem, big.NewInt(b.Debt))
	remaining := rem.String()
	if b.RemainingOverride != "" {
		remaining = b.RemainingOverride
	}
	status := b.Status
	if status == "" {
		status = "ACTIVE"
	}
	f := map[string]any{
		"scope_path": b.Scope, "unit": b.Unit,
		keys.BalanceField: PackFields(map[string]string{"status": status, "remaining": remaining,
			"reserved": i64(b.Reserved), "spent": i64(b.Spent), "allocated": i64(b.Allocated), "debt": i64(b.Debt),
			"overdraft_limit": i64(b.OverdraftLimit), "is_over_limit": strconv.FormatBool(b.IsOverLimit)}),
		"commit_overage_policy": "ALLOW_IF_AVAILABLE",
	}
	if b.Caps != "" {
		f["caps"] = b.Caps
	}
	for k, v := range b.Extra {
		f[k] = v
	}
	t := keys.Tenant(tenant)
	if err := c.HSet(ctx, t.Budget(b.Scope, b.Unit), f).Err(); err != nil {
		tb.Fatalf("seed budget %s %s: %v", b.Scope, b.Unit, err)
	}
	if err := c.ZAdd(ctx, t.Budgets(), redis.Z{Member: keys.BudgetMember(b.Scope, b.Unit)}).Err(); err != nil {
		tb.Fatalf("index budget %s %s: %v", b.Scope, b.Unit, err)
	}
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// balanceParts are the names of a packed balance's parts (internal/keys.Balance), in order.
var balanceParts = []string{"status", "remaining", "reserved", "spent", "allocated", "debt", "overdraft_limit", "is_over_limit"}

// PackFields is the stored balance (internal/keys.BalanceField) of the
// per-field values in f ("status", "remaining", ..., "is_over_limit"
// "true"|"false"), written verbatim so a test can store a broken one; an
// absent amount is "0", an absent status ACTIVE.
func PackFields(f map[string]string) string {
	parts := make([]string, len(balanceParts))
	for i, name := range balanceParts {
		v, ok := f[name]
		switch {
		case name == "is_over_limit" && (v == "true" || v == "1"):
			v = "1"
		case name == "is_over_limit" && (!ok || v == "false" || v == "0" || v == ""):
			v = "0"
		case name == "status" && !ok:
			v = "ACTIVE"
		case !ok:
			v = "0"
		}
		parts[i] = v
	}
	return strings.Join(parts, ":")
}

// BalanceFields is a stored budget hash m with its packed balance spelled out
// as the per-field names ("allocated", "remaining", ..., "is_over_limit"
// "true"|"false", "status"), beside m's other fields; m unchanged when it
// holds no balance of eight parts.
func BalanceFields(m map[string]string) map[string]string {
	out := make(map[string]string, len(m)+len(balanceParts))
	for k, v := range m {
		out[k] = v
	}
	parts := strings.Split(m[keys.BalanceField], ":")
	if len(parts) != len(balanceParts) {
		return out
	}
	for i, name := range balanceParts {
		out[name] = parts[i]
	}
	out["is_over_limit"] = strconv.FormatBool(parts[7] == "1")
	return out
}

// PatchBalance rewrites parts of the packed balance of the budget hash at
// key (names as BalanceFields gives them), verbatim: tests that store a
// deliberately broken or adjusted balance.
func PatchBalance(tb testing.TB, c redis.UniversalClient, key string, patch map[string]string) {
	tb.Helper()
	ctx := context.Background()
	m, err := c.HGetAll(ctx, key).Result()
	if err != nil {
		tb.Fatalf("read budget %s: %v", key, err)
	}
	f := BalanceFields(m)
	for k, v := range patch {
		f[k] = v
	}
	if err := c.HSet(ctx, key, keys.BalanceField, PackFields(f)).Err(); err != nil {
		tb.Fatalf("patch budget %s: %v", key, err)
	}
}

// State is a budget's ledger as stored (exact).
type State struct {
	Allocated, Remaining, Reserved, Spent, Debt, OverdraftLimit *big.Int
	IsOverLimit                                                 bool
	Status                                                      string
}

// String renders the state compactly: L(remaining, reserved, spent, debt, over).
func (s State) String() string {
	return fmt.Sprintf("L(rem=%s res=%s spent=%s debt=%s alloc=%s over=%v)", s.Remaining, s.Reserved, s.Spent, s.Debt, s.Allocated, s.IsOverLimit)
}

// ReadBudget reads one budget hash.
func ReadBudget(tb testing.TB, c redis.UniversalClient, tenant, scopePath, unit string) State {
	tb.Helper()
	m, err := c.HGetAll(context.Background(), keys.Tenant(tenant).Budget(scopePath, unit)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	if len(m) == 0 {
		tb.Fatalf("budget %s %s does not exist", scopePath, unit)
	}
	s, err := parseState(m)
	if err != nil {
		tb.Fatalf("budget %s %s: %v", scopePath, unit, err)
	}
	return s
}

func parseState(m map[string]string) (State, error) {
	m = BalanceFields(m)
	var s State
	var err error
	get := func(f string) *big.Int {
		v := m[f]
		if v == "" {
			v = "0"
		}
		n, ok := new(big.Int).SetString(v, 10)
		if !ok && err == nil {
			err = fmt.Errorf("field %s = %q is not an integer", f, v)
		}
		return n
	}
	s.Allocated, s.Remaining, s.Reserved = get("allocated"), get("remaining"), get("reserved")
	s.Spent, s.Debt, s.OverdraftLimit = get("spent"), get("debt"), get("overdraft_limit")
	s.IsOverLimit = m["is_over_limit"] == "true"
	s.Status = m["status"]
	return s, err
}

// Int parses a decimal string into a big.Int (test convenience).
func Int(s string) *big.Int {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		panic("ledgertest.Int: " + s)
	}
	return n
}

// scanKeys lists the keys matching pattern on every master.
func scanKeys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var out []string
	scan := func(ctx context.Context, cl redis.Cmdable) error {
		iter := cl.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, cl *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return scan(ctx, cl)
		})
		return out, err
	}
	return out, scan(ctx, c)
}

// globEscape escapes glob metacharacters of a literal key prefix.
func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

// CheckInvariants fails tb when the tenant's ledger breaks an invariant (see
// the package doc). Call it after every scenario.
func CheckInvariants(tb testing.TB, c redis.UniversalClient, tenant string) {
	tb.Helper()
	for _, v := range Violations(context.Background(), c, tenant) {
		tb.Errorf("ledger invariant (tenant %s): %s", tenant, v)
	}
}

// Violations returns the tenant's invariant violations (empty = sound).
func Violations(ctx context.Context, c redis.UniversalClient, tenant string) []string {
	t := keys.Tenant(tenant)
	prefix := t.Prefix()
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }

	// Budgets: the index plus any budget hash that exists.
	budgetKeys := map[string]bool{}
	members, err := c.ZRange(ctx, t.Budgets(), 0, -1).Result()
	if err != nil {
		return []string{"read budgets index: " + err.Error()}
	}
	for _, m := range members {
		i := strings.LastIndexByte(m, '|')
		if i < 0 {
			fail("budgets index member %q is malformed", m)
			continue
		}
		budgetKeys[t.Budget(m[:i], m[i+1:])] = true
	}
	found, err := scanKeys(ctx, c, globEscape(prefix)+"b:*")
	if err != nil {
		return []string{"scan budgets: " + err.Error()}
	}
	for _, k := range found {
		budgetKeys[k] = true
	}
	states := map[string]State{}
	for k := range budgetKeys {
		m, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			fail("read %s: %v", k, err)
			continue
		}
		if len(m) == 0 {
			fail("budgets index names %s, which does not exist", k)
			continue
		}
		s, err := parseState(m)
		if err != nil {
			fail("%s: %v", k, err)
			continue
		}
		states[k] = s
		want := new(big.Int).Set(s.Allocated)
		want.Sub(want, s.Spent).Sub(want, s.Reserved).Sub(want, s.Debt)
		if want.Cmp(s.Remaining) != 0 {
			fail("%s: remaining %s != allocated - spent - reserved - debt = %s (%s)", k, s.Remaining, want, s)
		}
		if s.Reserved.Sign() < 0 {
			fail("%s: reserved %s < 0", k, s.Reserved)
		}
	}

	// Reservations.
	deadline, err := c.ZRangeWithScores(ctx, t.Deadlines(), 0, -1).Result()
	if err != nil {
		return append(bad, "read deadline index: "+err.Error())
	}
	indexed := map[string]float64{}
	for _, z := range deadline {
		indexed[z.Member.(string)] = z.Score
	}
	recKeys, err := scanKeys(ctx, c, globEscape(prefix)+"r:*")
	if err != nil {
		return append(bad, "scan reservations: "+err.Error())
	}
	held := map[string]*big.Int{}
	active := map[string]bool{}
	for _, k := range recKeys {
		typ, err := c.Type(ctx, k).Result()
		if err != nil || typ != "hash" {
			continue // the indexes
		}
		r, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			fail("read %s: %v", k, err)
			continue
		}
		id := strings.TrimPrefix(k, prefix+"r:")
		for f := range r {
			if !keys.IsReservationField(f) {
				fail("reservation %s holds field %q, which keys.ReservationLayout does not list", id, f)
			}
		}
		if r["state"] != "ACTIVE" {
			continue
		}
		active[id] = true
		if r["quarantined_at"] == "" {
			score, ok := indexed[id]
			exp, e1 := strconv.ParseInt(r["expires_at"], 10, 64)
			grace, e2 := strconv.ParseInt(r["grace_ms"], 10, 64)
			switch {
			case !ok:
				fail("ACTIVE reservation %s is not in the deadline index", id)
			case e1 != nil || e2 != nil:
				fail("ACTIVE reservation %s has malformed expires_at/grace_ms", id)
			case int64(score) != exp+grace:
				fail("reservation %s deadline score %.0f != expires_at + grace_ms = %d", id, score, exp+grace)
			}
		}
		est, ok := new(big.Int).SetString(r["estimate"], 10)
		if !ok {
			fail("reservation %s estimate %q malformed", id, r["estimate"])
			continue
		}
		// Positions in the scope path or a JSON array (docs/design.md#reservation-records).
		scopes, err := keys.BudgetedScopes(r["budgeted"], r["scope_path"])
		if r["budgeted"] == "" {
			err = fmt.Errorf("missing")
		}
		if err != nil {
			fail("reservation %s budgeted %q malformed: %v", id, r["budgeted"], err)
			continue
		}
		for _, s := range scopes {
			bk := t.Budget(s, r["unit"])
			if held[bk] == nil {
				held[bk] = new(big.Int)
			}
			held[bk].Add(held[bk], est)
		}
	}
	for id := range indexed {
		if !active[id] {
			fail("deadline index holds %s, which is not an ACTIVE reservation", id)
		}
	}
	keysSorted := make([]string, 0, len(states))
	for k := range states {
		keysSorted = append(keysSorted, k)
	}
	sort.Strings(keysSorted)
	for _, k := range keysSorted {
		sum := held[k]
		if sum == nil {
			sum = new(big.Int)
		}
		if sum.Cmp(states[k].Reserved) != 0 {
			fail("%s: reserved %s != sum of ACTIVE estimates %s", k, states[k].Reserved, sum)
		}
	}
	for k, sum := range held {
		if _, ok := states[k]; !ok && sum.Sign() != 0 {
			// A reservation holds a budget that no longer exists.
			fail("ACTIVE reservations hold %s on %s, which does not exist", sum, k)
		}
	}
	return bad
}

// AwaitNoneActive polls tenant's deadline index every poll until it is empty
// (every reservation settled or expired, e.g. by a sweeper) or timeout has
// passed, and returns how many entries it still holds then (0: none).
func AwaitNoneActive(ctx context.Context, c redis.UniversalClient, tenant string, timeout, poll time.Duration) (int64, error) {
	deadline := time.Now().Add(timeout)
	for {
		n, err := c.ZCard(ctx, keys.Tenant(tenant).Deadlines()).Result()
		if err != nil || n == 0 || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(poll)
	}
}

// Dump renders every key of the tenant (type and full content, TTLs left
// out) in a canonical form, to assert that a refused request changed nothing.
func Dump(tb testing.TB, c redis.UniversalClient, tenant string) string {
	tb.Helper()
	ctx := context.Background()
	ks, err := scanKeys(ctx, c, globEscape(keys.Tenant(tenant).Prefix())+"*")
	if err != nil {
		tb.Fatal(err)
	}
	sort.Strings(ks)
	var b strings.Builder
	for _, k := range ks {
		typ, err := c.Type(ctx, k).Result()
		if err != nil {
			tb.Fatal(err)
		}
		fmt.Fprintf(&b, "%s (%s)\n", k, typ)
		switch typ {
		case "hash":
			m, _ := c.HGetAll(ctx, k).Result()
			fs := make([]string, 0, len(m))
			for f := range m {
				fs = append(fs, f)
			}
			sort.Strings(fs)
			for _, f := range fs {
				fmt.Fprintf(&b, "  %s = %s\n", f, m[f])
			}
		case "zset":
			zs, _ := c.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				fmt.Fprintf(&b, "  %v %.0f\n", z.Member, z.Score)
			}
		case "string":
			v, _ := c.Get(ctx, k).Result()
			fmt.Fprintf(&b, "  %s\n", v)
		case "stream":
			msgs, _ := c.XRange(ctx, k, "-", "+").Result()
			for _, m := range msgs {
				fmt.Fprintf(&b, "  %s %v\n", m.ID, m.Values)
			}
		}
	}
	return b.String()
}

// Events returns the event types in the tenant's stream, oldest first.
func Events(tb testing.TB, c redis.UniversalClient, tenant string) []map[string]string {
	tb.Helper()
	msgs, err := c.XRange(context.Background(), keys.Tenant(tenant).Events(), "-", "+").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]map[string]string, len(msgs))
	for i, m := range msgs {
		out[i] = map[string]string{}
		for k, v := range m.Values {
			out[i][k] = fmt.Sprint(v)
		}
	}
	return out
}

// EventTypes lists the types of Events.
func EventTypes(tb testing.TB, c redis.UniversalClient, tenant string) []string {
	tb.Helper()
	evs := Events(tb, c, tenant)
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e["type"]
	}
	return out
}

// AddToBalance adds deltas to amounts of the packed balance of the budget
// hash at key (names as BalanceFields gives them): the test counterpart of
// the HINCRBY a per-field layout would take.
func AddToBalance(tb testing.TB, c redis.UniversalClient, key string, deltas map[string]int64) {
	tb.Helper()
	m, err := c.HGetAll(context.Background(), key).Result()
	if err != nil {
		tb.Fatalf("read budget %s: %v", key, err)
	}
	f := BalanceFields(m)
	patch := map[string]string{}
	for name, d := range deltas {
		n, ok := new(big.Int).SetString(f[name], 10)
		if !ok {
			tb.Fatalf("budget %s: %s = %q is not an integer", key, name, f[name])
		}
		patch[name] = n.Add(n, big.NewInt(d)).String()
	}
	PatchBalance(tb, c, key, patch)
}
