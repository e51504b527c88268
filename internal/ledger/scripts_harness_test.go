package ledger_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// The script-level suites call lua/ledger/* directly through the executor
// (no Go handler in between), on every backend: the real redis-server and
// the embedded store.

const testEventCtx = `{"base":"00112233445566","retention_ms":604800000,"actor":"api_key","key_id":"k1","request_id":"req-1","trace_id":"0123456789abcdef0123456789abcdef"}`

// sx is one script-level scenario on a fresh tenant of one backend.
type sx struct {
	t      *testing.T
	c      redis.UniversalClient
	ex     *script.Executor
	tenant string
	tk     keys.Tenant
}

// eachBackend runs f once per backend, each on its own fresh tenant, and
// checks the ledger invariants afterwards.
func eachBackend(t *testing.T, f func(t *testing.T, s *sx)) {
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ex := scripttest.New(t, be)
			tenant := ledgertest.NewTenantID(t)
			s := &sx{t: t, c: be.Client, ex: ex, tenant: tenant, tk: keys.Tenant(tenant)}
			f(t, s)
			ledgertest.CheckInvariants(t, be.Client, tenant)
		})
	}
}

func (s *sx) path(rest string) string {
	if rest == "" {
		return "tenant:" + s.tenant
	}
	return "tenant:" + s.tenant + "/" + rest
}

func (s *sx) budget(b ledgertest.Budget) {
	s.t.Helper()
	if b.Unit == "" {
		b.Unit = "TOKENS"
	}
	b.Scope = s.path(b.Scope)
	ledgertest.SeedBudget(s.t, s.c, s.tenant, b)
}

func (s *sx) st(rest string) ledgertest.State {
	s.t.Helper()
	return ledgertest.ReadBudget(s.t, s.c, s.tenant, s.path(rest), "TOKENS")
}

func (s *sx) dump() string { return ledgertest.Dump(s.t, s.c, s.tenant) }

// out is a decoded mutation result with its snapshot.
type out struct {
	Replay  bool           `json:"replay"`
	Resp    string         `json:"resp"`
	RemTTL  string         `json:"rem_ttl"`
	Denied  string         `json:"denied"`
	Overage string         `json:"overage"`
	Debt    string         `json:"debt"`
	Snap    map[string]any `json:"-"`
}

func (s *sx) run(name string, ks []string, args ...any) (*out, error) {
	d, _ := script.Lookup(name)
	reply, err := s.ex.RunFlat(ctx, d, ks, args...)
	if err != nil {
		return nil, err
	}
	o, err := flatOut(name, reply)
	if err != nil {
		s.t.Fatalf("%s: %v (%v)", name, err, reply)
	}
	return o, nil
}

// flatLayouts are the flat replies of the mutations after the replay flag
// (lua/lib/ledger_snapshot.lua): the extras, then the snapshot fields named
// as the JSON snapshots named them ("*" a list of strings, "#" a balance list).
var flatLayouts = map[string]struct {
	status         string
	extras, fields []string
}{
	"ledger/reserve": {"", []string{"rem_ttl", "denied"}, []string{"dry", "decision", "reason_code", "reservation_id",
		"reserved", "unit", "expires_at_ms", "scope_path", "grace_ms", "policy", "caps", "*affected", "#balances",
		"?deny_detail", "?observed"}},
	"ledger/commit":  {"COMMITTED", []string{"overage", "debt"}, []string{"unit", "charged", "released", "debt_incurred", "#balances"}},
	"ledger/release": {"RELEASED", nil, []string{"unit", "released", "#balances"}},
	"ledger/extend":  {"ACTIVE", []string{"rem_ttl"}, []string{"unit", "expires_at_ms", "extension_count", "#balances"}},
	"ledger/decide":  {"", []string{"denied"}, []string{"decision", "reason_code", "caps", "*affected", "?deny_detail"}},
	"ledger/event":   {"APPLIED", []string{"debt"}, []string{"event_id", "unit", "charged", "debt_incurred", "#balances"}},
}

var balanceFields = []string{"scope_path", "remaining", "reserved", "spent", "allocated", "debt", "overdraft_limit", "is_over_limit"}

// flatOut reads a flat reply into the envelope and snapshot map the suites
// assert on (absent fields, empty strings, are left out of the map; dry '0' too). Resp is
// the snapshot's reply elements verbatim, so replays compare byte for byte.
func flatOut(name string, reply []any) (*out, error) {
	lay, ok := flatLayouts[name]
	if !ok {
		return nil, fmt.Errorf("no layout for %s", name)
	}
	i := script.FlatFields
	next := func() (string, error) {
		if i >= len(reply) {
			return "", fmt.Errorf("reply ends early")
		}
		v := reply[i]
		i++
		switch t := v.(type) {
		case string:
			return t, nil
		case int64:
			return strconv.FormatInt(t, 10), nil
		}
		return "", fmt.Errorf("element %d is %T", i-1, v)
	}
	o := &out{Snap: map[string]any{}}
	replay, err := next()
	if err != nil {
		return nil, err
	}
	o.Replay = replay == "1"
	env := map[string]*string{"rem_ttl": &o.RemTTL, "denied": &o.Denied, "overage": &o.Overage, "debt": &o.Debt}
	for _, x := range lay.extras {
		v, err := next()
		if err != nil {
			return nil, err
		}
		*env[x] = v
	}
	start := i
	if lay.status != "" {
		o.Snap["status"] = lay.status
	}
	for _, f := range lay.fields {
		if f[0] == '?' {
			// A v0.1.26 trailing field: absent from answers stored before it.
			if i >= len(reply) {
				break
			}
			f = f[1:]
		}
		switch f[0] {
		case '*', '#':
			n, err := next()
			if err != nil {
				return nil, err
			}
			list := []any{}
			for k := 0; int64(k) < atoi(n); k++ {
				v, err := next()
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			if f[0] == '*' {
				if len(list) == 0 { // the scope path's prefixes
					path, _ := o.Snap["scope_path"].(string)
					for k, c := range path {
						if c == '/' {
							list = append(list, path[:k])
						}
					}
					list = append(list, path)
				}
				o.Snap[f[1:]] = list
				continue
			}
			packed, err := next()
			if err != nil {
				return nil, err
			}
			rows := []any{}
			for _, r := range strings.Split(packed, ";") {
				if r == "" {
					continue
				}
				v := strings.Split(r, ",")
				idx := int(atoi(v[0]))
				if len(v) != len(balanceFields) || idx < 1 || idx > len(list) {
					return nil, fmt.Errorf("malformed balance row %q", r)
				}
				row := map[string]any{"scope_path": list[idx-1]}
				for k, bf := range balanceFields[1:] {
					row[bf] = v[k+1]
				}
				row["is_over_limit"] = v[7] == "1"
				rows = append(rows, row)
			}
			o.Snap[f[1:]] = rows
		default:
			v, err := next()
			if err != nil {
				return nil, err
			}
			if v != "" && !(f == "dry" && v == "0") {
				o.Snap[f] = v
			}
		}
	}
	if i != len(reply) {
		return nil, fmt.Errorf("%d trailing elements", len(reply)-i)
	}
	o.Resp = fmt.Sprintf("%#v", reply[start:])
	return o, nil
}

// rc is one call of ledger/reserve.
type rc struct {
	Mode, RID, Unit, Est, TTL, Grace, Policy, Key, Hash string
	Scopes                                              []string // relative to the tenant; "" = tenant level
	Observe                                             string   // ARGV 16: the request's observe mode ('' = the tenant's)
	Extra                                               []any    // appended ARGV (must be ignored)
}

func (s *sx) affected(rests []string) ([]string, string) {
	if len(rests) == 0 {
		rests = []string{"", "workspace:prod"}
	}
	paths := make([]string, len(rests))
	for i, r := range rests {
		paths[i] = s.path(r)
	}
	j, _ := json.Marshal(paths)
	return paths, string(j)
}

func (s *sx) reserve(c rc) (*out, error) {
	if c.Mode == "" {
		c.Mode = "live"
	}
	if c.RID == "" {
		c.RID = uuid.NewString()
	}
	if c.Unit == "" {
		c.Unit = "TOKENS"
	}
	if c.Grace == "" {
		c.Grace = "5000"
	}
	if c.Key == "" {
		c.Key = "rk-" + uuid.NewString()
	}
	if c.Hash == "" {
		c.Hash = "h-" + c.Key
	}
	paths, aff := s.affected(c.Scopes)
	ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Budgets(), s.tk.Reservation(c.RID), s.tk.Deadlines(),
		s.tk.Created(), s.tk.Expires(), s.tk.Idempotency("reserve", c.Key), s.tk.Events()}
	for _, p := range paths {
		ks = append(ks, s.tk.Budget(p, c.Unit))
	}
	args := []any{c.Mode, c.RID, c.Unit, c.Est, c.TTL, c.Grace, c.Policy, c.Key, c.Hash, paths[len(paths)-1], aff,
		`{"tenant":"` + s.tenant + `","workspace":"prod"}`, `{"kind":"llm.completion","name":"m"}`, "", testEventCtx, c.Observe}
	return s.run("ledger/reserve", ks, append(args, c.Extra...)...)
}

// mustReserve reserves est live and returns the reservation id.
func (s *sx) mustReserve(c rc) string {
	s.t.Helper()
	o, err := s.reserve(c)
	if err != nil {
		s.t.Fatalf("reserve: %v", err)
	}
	return o.Snap["reservation_id"].(string)
}

func (s *sx) commit(rid, unit, actual, key string, extra ...any) (*out, error) {
	if unit == "" {
		unit = "TOKENS"
	}
	ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Reservation(rid), s.tk.Deadlines(), s.tk.Events()}
	args := append([]any{rid, unit, actual, key, "h-" + key + "-" + actual, "", "", testEventCtx}, extra...)
	return s.run("ledger/commit", ks, args...)
}

func (s *sx) release(rid, key string, extra ...any) (*out, error) {
	ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Reservation(rid), s.tk.Deadlines()}
	return s.run("ledger/release", ks, append([]any{rid, key, "h-" + key, "done"}, extra...)...)
}

func (s *sx) extend(rid, by, key string, extra ...any) (*out, error) {
	ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Reservation(rid), s.tk.Deadlines(), s.tk.Expires(),
		s.tk.Idempotency("extend:"+rid, key)}
	return s.run("ledger/extend", ks, append([]any{rid, by, key, "h-" + key + "-" + by, ""}, extra...)...)
}

// ec is one call of ledger/event.
type ec struct {
	Unit, Actual, Policy, Key, Hash, ClientTime string
	Scopes                                      []string
}

func (s *sx) event(c ec) (*out, error) {
	if c.Unit == "" {
		c.Unit = "TOKENS"
	}
	if c.Key == "" {
		c.Key = "ek-" + uuid.NewString()
	}
	if c.Hash == "" {
		c.Hash = "h-" + c.Key
	}
	eid := uuid.NewString()
	paths, aff := s.affected(c.Scopes)
	ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Budgets(), s.tk.Event(eid), s.tk.Idempotency("event", c.Key), s.tk.Events()}
	for _, p := range paths {
		ks = append(ks, s.tk.Budget(p, c.Unit))
	}
	return s.run("ledger/event", ks, eid, c.Unit, c.Actual, c.Policy, c.Key, c.Hash, paths[len(paths)-1], aff,
		`{"workspace":"prod"}`, `{"kind":"k","name":"n"}`, "", "", c.ClientTime, testEventCtx)
}

func (s *sx) decide(est, key string, scopes ...string) (*out, error) {
	if key == "" {
		key = "dk-" + uuid.NewString()
	}
	paths, aff := s.affected(scopes)
	ks := []string{s.tk.Prefix(), s.tk.Record(), s.tk.Budgets(), s.tk.Idempotency("decide", key), s.tk.Events()}
	for _, p := range paths {
		ks = append(ks, s.tk.Budget(p, "TOKENS"))
	}
	return s.run("ledger/decide", ks, "TOKENS", est, key, "h-"+key, paths[len(paths)-1], aff, `{}`, `{}`, testEventCtx)
}

// record reads a reservation hash.
func (s *sx) record(rid string) map[string]string {
	s.t.Helper()
	m, err := s.c.HGetAll(ctx, s.tk.Reservation(rid)).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return m
}

// shiftExpiry moves a reservation's expiry to now + delta ms (Redis TIME),
// keeping the deadline index consistent: how the suites control time without
// sleeping.
func (s *sx) shiftExpiry(rid string, deltaMs int64) {
	s.t.Helper()
	now := redisNow(s.t, s.c)
	exp := now + deltaMs
	r := s.record(rid)
	grace := atoi(r["grace_ms"])
	if err := s.c.HSet(ctx, s.tk.Reservation(rid), "expires_at", itoa(exp)).Err(); err != nil {
		s.t.Fatal(err)
	}
	if err := s.c.ZAdd(ctx, s.tk.Deadlines(), redis.Z{Score: float64(exp + grace), Member: rid}).Err(); err != nil {
		s.t.Fatal(err)
	}
}

func (s *sx) events() []string { return ledgertest.EventTypes(s.t, s.c, s.tenant) }
