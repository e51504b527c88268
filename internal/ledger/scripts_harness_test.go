package ledger_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/ledger"
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

func (s *sx) path(rest string) string { return scopeOf(s.tenant, rest) }

// budget seeds b with its scope taken below the tenant's root.
func (s *sx) budget(b ledgertest.Budget) {
	s.t.Helper()
	b.Scope = s.path(b.Scope)
	seedBudget(s.t, s.c, s.tenant, b)
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

// call runs a ledger mutation through its typed binding (extra: ARGV
// appended after the binding's own, which a script without a variadic tail
// must ignore) and reads its reply with the ledger's layout.
func call[K, A any](s *sx, sc *script.Script[K, A], k K, a A, extra ...any) (*out, error) {
	ks, args := sc.Encode(k, a)
	reply, err := s.ex.RunFlat(ctx, sc.Def, ks, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	o, err := flatOut(sc.Name(), reply)
	if err != nil {
		s.t.Fatalf("%s: %v (%v)", sc.Name(), err, reply)
	}
	return o, nil
}

// statusOf is the status each mutation's response carries (not in the reply).
var statusOf = map[string]string{"ledger/commit": "COMMITTED", "ledger/release": "RELEASED",
	"ledger/extend": "ACTIVE", "ledger/event": "APPLIED"}

var balanceFields = []string{"scope_path", "remaining", "reserved", "spent", "allocated", "debt", "overdraft_limit", "is_over_limit"}

// flatOut reads a flat reply, by the ledger's layout of it
// (ledger.ReplyLayouts), into the envelope and snapshot map the suites
// assert on (absent fields, empty strings, are left out of the map; dry '0'
// too). Resp is the answer's reply elements verbatim (after the extras), so
// replays compare byte for byte.
func flatOut(name string, reply []any) (*out, error) {
	lay, ok := ledger.ReplyLayouts[name]
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
	env := map[string]*string{"rem_ttl": &o.RemTTL, "denied": &o.Denied, "overage": &o.Overage, "debt": &o.Debt}
	start := -1
	if st := statusOf[name]; st != "" {
		o.Snap["status"] = st
	}
	for _, fd := range lay.Fields() {
		if fd.Extra {
			v, err := next()
			if err != nil {
				return nil, err
			}
			if fd.Name == "replay" {
				o.Replay = v == "1"
			} else if p := env[fd.Name]; p != nil {
				*p = v
			} else {
				return nil, fmt.Errorf("%s: no envelope field for extra %q", name, fd.Name)
			}
			continue
		}
		if start < 0 {
			start = i
		}
		if fd.Trailing && i >= len(reply) {
			break // left out by this answer
		}
		f := ledger.KindToken(fd)
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
	Observe                                             string   // the request's observe mode ('' = the tenant's)
	Extra                                               []any    // appended ARGV (must be ignored)
}

// reserveArgs is ledger/reserve's ARGV with the estimate as sent (a
// string, so a suite can send one no int64 holds), rebound to the ledger's
// binding (script.Rebind checks the names against it).
type reserveArgs struct {
	Mode           string `lua:"mode"`
	ID             string `lua:"reservation_id"`
	Unit           string `lua:"unit"`
	Estimate       string `lua:"estimate"`
	TTLms          string `lua:"ttl_ms"`
	GraceMs        string `lua:"grace_ms"`
	Overage        string `lua:"overage_policy"`
	IdempotencyKey string `lua:"idempotency_key"`
	PayloadHash    string `lua:"payload_hash"`
	ScopePath      string `lua:"scope_path"`
	Affected       string `lua:"affected"`
	Subject        string `lua:"subject"`
	Action         string `lua:"action"`
	Metadata       string `lua:"metadata"`
	EventCtx       string `lua:"event_ctx"`
	ObserveMode    string `lua:"observe_mode"`
	ActionKind     string `lua:"action_kind"`
	RiskClass      string `lua:"risk_class"`
	RunID          string `lua:"run_id"`
	PolicyKeys     string `lua:"policy_keys"`
}

var scriptReserve = func() *script.Script[ledger.ReserveKeys, reserveArgs] {
	sc, err := script.Rebind[ledger.ReserveKeys, reserveArgs](ledger.ScriptReserve.Def)
	if err != nil {
		panic(err)
	}
	return sc
}()

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

// budgetKeys are the budget hashes of paths in unit.
func (s *sx) budgetKeys(paths []string, unit string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = s.tk.Budget(p, unit)
	}
	return out
}

func (s *sx) reserve(c rc) (*out, error) {
	c.Mode = cmp.Or(c.Mode, "live")
	c.RID = cmp.Or(c.RID, uuid.NewString())
	c.Unit = cmp.Or(c.Unit, "TOKENS")
	c.Grace = cmp.Or(c.Grace, "5000")
	c.Key = cmp.Or(c.Key, "rk-"+uuid.NewString())
	c.Hash = cmp.Or(c.Hash, "h-"+c.Key)
	paths, aff := s.affected(c.Scopes)
	return call(s, scriptReserve, ledger.ReserveKeys{Prefix: s.tk.Prefix(), Record: s.tk.Record(), Budgets: s.tk.Budgets(),
		Reservation: s.tk.Reservation(c.RID), Deadlines: s.tk.Deadlines(), Created: s.tk.Created(), Expires: s.tk.Expires(),
		Idem: s.tk.Idempotency("reserve", c.Key), Events: s.tk.Events(), Budget: s.budgetKeys(paths, c.Unit)},
		reserveArgs{Mode: c.Mode, ID: c.RID, Unit: c.Unit, Estimate: c.Est, TTLms: c.TTL, GraceMs: c.Grace,
			Overage: c.Policy, IdempotencyKey: c.Key, PayloadHash: c.Hash, ScopePath: paths[len(paths)-1], Affected: aff,
			Subject: `{"tenant":"` + s.tenant + `","workspace":"prod"}`, Action: `{"kind":"llm.completion","name":"m"}`,
			EventCtx: testEventCtx, ObserveMode: c.Observe}, c.Extra...)
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

func (s *sx) commit(rid, unit, actual, key string) (*out, error) {
	if unit == "" {
		unit = "TOKENS"
	}
	return call(s, ledger.ScriptCommit, ledger.CommitKeys{Prefix: s.tk.Prefix(), Record: s.tk.Record(),
		Reservation: s.tk.Reservation(rid), Deadlines: s.tk.Deadlines(), Events: s.tk.Events()},
		ledger.CommitArgs{ID: rid, Unit: unit, Amount: atoi(actual), IdempotencyKey: key,
			PayloadHash: "h-" + key + "-" + actual, EventCtx: testEventCtx})
}

// release releases rid under key, within scopeFilter (the key's filter as
// the script receives it; "" = none).
func (s *sx) release(rid, key string, scopeFilter ...string) (*out, error) {
	return call(s, ledger.ScriptRelease, ledger.ReleaseKeys{Prefix: s.tk.Prefix(), Record: s.tk.Record(),
		Reservation: s.tk.Reservation(rid), Deadlines: s.tk.Deadlines()},
		ledger.ReleaseArgs{ID: rid, IdempotencyKey: key, PayloadHash: "h-" + key, Reason: "done",
			ScopeFilter: strings.Join(scopeFilter, "")})
}

// extend extends rid by `by` ms (extra: appended ARGV, which extend ignores).
func (s *sx) extend(rid, by, key string, extra ...any) (*out, error) {
	return call(s, ledger.ScriptExtend, ledger.ExtendKeys{Prefix: s.tk.Prefix(), Record: s.tk.Record(),
		Reservation: s.tk.Reservation(rid), Deadlines: s.tk.Deadlines(), Expires: s.tk.Expires(),
		Idem: s.tk.Idempotency("extend:"+rid, key)},
		ledger.ExtendArgs{ID: rid, ExtendByMs: atoi(by), IdempotencyKey: key, PayloadHash: "h-" + key + "-" + by}, extra...)
}

// ec is one call of ledger/event.
type ec struct {
	Unit, Actual, Policy, Key, Hash, ClientTime string
	Scopes                                      []string
}

func (s *sx) event(c ec) (*out, error) {
	c.Unit = cmp.Or(c.Unit, "TOKENS")
	c.Key = cmp.Or(c.Key, "ek-"+uuid.NewString())
	c.Hash = cmp.Or(c.Hash, "h-"+c.Key)
	eid := uuid.NewString()
	paths, aff := s.affected(c.Scopes)
	return call(s, ledger.ScriptEvent, ledger.EventKeys{Prefix: s.tk.Prefix(), Record: s.tk.Record(), Budgets: s.tk.Budgets(),
		Event: s.tk.Event(eid), Idem: s.tk.Idempotency("event", c.Key), Events: s.tk.Events(), Budget: s.budgetKeys(paths, c.Unit)},
		ledger.EventArgs{ID: eid, Unit: c.Unit, Amount: atoi(c.Actual), Overage: c.Policy, IdempotencyKey: c.Key,
			PayloadHash: c.Hash, ScopePath: paths[len(paths)-1], Affected: aff, Subject: `{"workspace":"prod"}`,
			Action: `{"kind":"k","name":"n"}`, ClientTimeMs: c.ClientTime, EventCtx: testEventCtx})
}

// decideWith decides est under key with payload hash hash.
func (s *sx) decideWith(est, key, hash string, scopes ...string) (*out, error) {
	paths, aff := s.affected(scopes)
	return call(s, ledger.ScriptDecide, ledger.DecideKeys{Prefix: s.tk.Prefix(), Record: s.tk.Record(), Budgets: s.tk.Budgets(),
		Idem: s.tk.Idempotency("decide", key), Events: s.tk.Events(), Budget: s.budgetKeys(paths, "TOKENS")},
		ledger.DecideArgs{Unit: "TOKENS", Estimate: atoi(est), IdempotencyKey: key, PayloadHash: hash,
			ScopePath: paths[len(paths)-1], Affected: aff, Subject: `{}`, Action: `{}`, EventCtx: testEventCtx})
}

func (s *sx) decide(est, key string, scopes ...string) (*out, error) {
	if key == "" {
		key = "dk-" + uuid.NewString()
	}
	return s.decideWith(est, key, "h-"+key, scopes...)
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
