package sweeper

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/eventctx"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/test/ledgertest"
	"github.com/cyclesgo/cycles-go/test/redistest"
	"github.com/cyclesgo/cycles-go/test/scripttest"
)

// Test fixture: seeds tenants, budgets, reservation records and deadline
// entries directly, exactly per internal/keys/records.go (the ledger scripts that
// normally write them are built concurrently by another engineer).

const (
	i53p1  = "9007199254740993"    // 2^53 + 1: not representable as a float64
	i64max = "9223372036854775807" // 2^63 - 1
)

type fixture struct {
	t      testing.TB
	ctx    context.Context
	be     redistest.Backend
	c      redis.UniversalClient
	ex     *script.Executor
	tenant string
	k      keys.Tenant
}

func newFixture(t testing.TB, c redis.UniversalClient) *fixture {
	t.Helper()
	return newFixtureFor(t, redistest.BackendOn(t, c))
}

// newFixtureFor is a fixture on one leg of redistest.Backends, its scripts
// sent the way production sends them on that backend.
func newFixtureFor(t testing.TB, be redistest.Backend) *fixture {
	t.Helper()
	f := newFixtureWith(t, be.Client, scripttest.New(t, be))
	f.be = be
	return f
}

// eachBackend runs body once on every leg of redistest.Backends, as a
// subtest with a fresh fixture (a new tenant) on that leg.
func eachBackend(t *testing.T, body func(t *testing.T, f *fixture)) {
	t.Helper()
	for _, be := range redistest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) { body(t, newFixtureFor(t, be)) })
	}
}

func newFixtureWith(t testing.TB, c redis.UniversalClient, ex *script.Executor) *fixture {
	tenant := "sw-" + randHex(6)
	return &fixture{t: t, ctx: context.Background(), c: c, ex: ex, tenant: tenant, k: keys.Tenant(tenant)}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// register adds the tenant to the global registry, as the admin plane does
// before it creates a tenant.
func (f *fixture) register() *fixture {
	f.t.Helper()
	if err := f.c.ZAdd(f.ctx, keys.Tenants, redis.Z{Member: f.tenant}).Err(); err != nil {
		f.t.Fatal(err)
	}
	return f
}

func (f *fixture) scopes(n int) []string {
	levels := []string{"tenant:" + f.tenant, "workspace:prod", "app:chat", "workflow:w", "agent:bot", "toolset:t"}
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Join(levels[:i+1], "/")
	}
	return out
}

// budget seeds a budget hash whose ledger invariant holds:
// remaining = allocated - spent - reserved - debt (spent = debt = 0).
func (f *fixture) budget(scope, unit, allocated, reserved string) string {
	f.t.Helper()
	rem := new(big.Int).Sub(bigOf(f.t, allocated), bigOf(f.t, reserved))
	return f.budgetRaw(scope, unit, map[string]string{"allocated": allocated, "reserved": reserved, "remaining": rem.String()})
}

// budgets seeds one budget at each of scopes (budget) and returns their
// keys in that order.
func (f *fixture) budgets(scopes []string, unit, allocated, reserved string) []string {
	f.t.Helper()
	keys := make([]string, len(scopes))
	for i, s := range scopes {
		keys[i] = f.budget(s, unit, allocated, reserved)
	}
	return keys
}

// budgetRaw seeds a budget with the given ledger amounts, packed verbatim
// into its balance (may break invariants or the layout).
func (f *fixture) budgetRaw(scope, unit string, fields map[string]string) string {
	f.t.Helper()
	key := f.k.Budget(scope, unit)
	vals := map[string]any{
		"scope_path": scope, "unit": unit, "created_at": "1", "updated_at": "1",
		keys.BalanceField: ledgertest.PackFields(fields),
	}
	if err := f.c.HSet(f.ctx, key, vals).Err(); err != nil {
		f.t.Fatal(err)
	}
	if err := f.c.ZAdd(f.ctx, f.k.Budgets(), redis.Z{Member: keys.BudgetMember(scope, unit)}).Err(); err != nil {
		f.t.Fatal(err)
	}
	return key
}

func bigOf(t testing.TB, s string) *big.Int {
	t.Helper()
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		t.Fatalf("not an integer: %q", s)
	}
	return v
}

// resv describes one seeded reservation record.
type resv struct {
	ID        string
	State     string // default ACTIVE
	Unit      string // default TOKENS
	Estimate  string
	Budgeted  []string // JSON-encoded into "budgeted" unless Fields overrides it
	CreatedAt int64
	ExpiresAt int64
	GraceMs   int64
	ExtCount  int
	// Score of the deadline entry; default ExpiresAt + GraceMs.
	Score *int64
	// Fields override or add raw record fields; a "" value deletes the field.
	Fields map[string]string
}

func (f *fixture) reservation(r resv) string {
	f.t.Helper()
	if r.ID == "" {
		r.ID = "r-" + randHex(8)
	}
	f.reservationTo(f.c, r)
	return r.ID
}

// reservationTo writes r with p (a client or a pipeline).
func (f *fixture) reservationTo(p redis.Cmdable, r resv) {
	if r.State == "" {
		r.State = "ACTIVE"
	}
	if r.Unit == "" {
		r.Unit = "TOKENS"
	}
	budgeted, _ := json.Marshal(r.Budgeted)
	scopePath := ""
	if len(r.Budgeted) > 0 {
		scopePath = r.Budgeted[len(r.Budgeted)-1]
	}
	affected, _ := json.Marshal(r.Budgeted)
	rec := map[string]string{
		"state": r.State, "unit": r.Unit, "estimate": r.Estimate,
		"scope_path": scopePath, "affected": string(affected), "budgeted": string(budgeted),
		"created_at": itoa(r.CreatedAt), "expires_at": itoa(r.ExpiresAt), "grace_ms": itoa(r.GraceMs),
		"policy": "ALLOW_IF_AVAILABLE", "max_ext": "10", "ext_count": strconv.Itoa(r.ExtCount),
		"idem_key": "k-" + r.ID, "subject": `{"tenant":"` + f.tenant + `"}`,
		"action": `{"kind":"llm.completion","name":"m"}`, "metadata": "{}",
	}
	var del []string
	for k, v := range r.Fields {
		if v == "" {
			delete(rec, k)
			del = append(del, k)
			continue
		}
		rec[k] = v
	}
	key := f.k.Reservation(r.ID)
	args := make([]any, 0, 2*len(rec))
	for k, v := range rec {
		args = append(args, k, v)
	}
	p.HSet(f.ctx, key, args...)
	if len(del) > 0 {
		p.HDel(f.ctx, key, del...)
	}
	score := r.ExpiresAt + r.GraceMs
	if r.Score != nil {
		score = *r.Score
	}
	p.ZAdd(f.ctx, f.k.Deadlines(), redis.Z{Score: float64(score), Member: r.ID})
}

// seedDue seeds n ACTIVE reservations of estimate 1 held on the scopes sc,
// created at now-9000 ms and due one millisecond apart from now-5000 ms, so
// the script meets them in seeding order.
func (f *fixture) seedDue(now int64, sc []string, n int) {
	f.t.Helper()
	for i := 0; i < n; i++ {
		f.reservation(resv{Estimate: "1", Budgeted: sc, CreatedAt: now - 9000, ExpiresAt: now - 5000 + int64(i)})
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func ptr(v int64) *int64 { return &v }

// redisNow is Redis TIME in ms.
func (f *fixture) redisNow() int64 {
	f.t.Helper()
	return ledgertest.RedisNowMs(f.t, f.c)
}

// expire runs the batch script directly (no Go sweeper logic in between).
func (f *fixture) expire(batch int, extra ...any) batchResult {
	f.t.Helper()
	r, err := f.tryExpire(batch, extra...)
	if err != nil {
		f.t.Fatalf("expire_batch: %v", err)
	}
	return r
}

func (f *fixture) tryExpire(batch int, extra ...any) (batchResult, error) {
	// ARGV 3.. default to no tail, no tenant check, no archive and a 1 s
	// time budget (no test batch comes near it); extra overrides them.
	args := []any{batch, eventctx.Arg(context.Background(), eventctx.DefaultRetention), "", "", "", int64(time.Second / time.Microsecond)}
	args = append(args[:2], append(extra, args[2+min(len(extra), 4):]...)...)
	return f.runExpire(f.k.SweepTally(newDrainID()), args...)
}

// runExpire runs expire_batch on the fixture's tenant with the given tally
// key and ARGV as they are: for the tests of the tally and of bad arguments.
func (f *fixture) runExpire(tally string, args ...any) (batchResult, error) {
	var r batchResult
	err := f.ex.RunInto(f.ctx, &r, scriptExpireBatch.Def, []string{f.k.Prefix(), f.k.Deadlines(), f.k.Events(), tally}, args...)
	return r, err
}

func (f *fixture) hget(key, field string) string {
	f.t.Helper()
	v, err := f.c.HGet(f.ctx, key, field).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		f.t.Fatal(err)
	}
	return v
}

func (f *fixture) hgetall(key string) map[string]string {
	f.t.Helper()
	v, err := f.c.HGetAll(f.ctx, key).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return v
}

// budgetHash reads a budget hash, its packed balance spelled out per field.
func (f *fixture) budgetHash(key string) map[string]string {
	f.t.Helper()
	return ledgertest.BalanceFields(f.hgetall(key))
}

// indexed is id's deadline in the expiry index, and whether it is there.
func (f *fixture) indexed(id string) (int64, bool) {
	f.t.Helper()
	s, err := f.c.ZScore(f.ctx, f.k.Deadlines(), id).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return int64(s), true
}

func (f *fixture) inIndex(id string) bool {
	f.t.Helper()
	_, ok := f.indexed(id)
	return ok
}

// score is id's deadline in the expiry index, which must hold it.
func (f *fixture) score(id string) int64 {
	f.t.Helper()
	s, ok := f.indexed(id)
	if !ok {
		f.t.Fatalf("%s is not in the expiry index", id)
	}
	return s
}

// streamEvents returns the tenant's stream entries.
func (f *fixture) streamEvents() []redis.XMessage {
	f.t.Helper()
	msgs, err := f.c.XRange(f.ctx, f.k.Events(), "-", "+").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	return msgs
}

// ledger returns reserved and remaining of a budget key.
func (f *fixture) ledger(key string) (reserved, remaining string) {
	f.t.Helper()
	h := f.budgetHash(key)
	return h["reserved"], h["remaining"]
}

// wantLedger fails the test unless the budget key holds reserved and
// remaining.
func (f *fixture) wantLedger(key, reserved, remaining string) {
	f.t.Helper()
	if res, rem := f.ledger(key); res != reserved || rem != remaining {
		f.t.Fatalf("%s: reserved=%s remaining=%s, want %s and %s", key, res, rem, reserved, remaining)
	}
}

// wantEvents fails the test unless the tenant's stream holds n events, and
// returns them.
func (f *fixture) wantEvents(n int) []redis.XMessage {
	f.t.Helper()
	msgs := f.streamEvents()
	if len(msgs) != n {
		f.t.Fatalf("%d events, want %d", len(msgs), n)
	}
	return msgs
}

// checkInvariant asserts remaining = allocated - spent - reserved - debt and
// reserved >= 0 on a budget (math/big on the raw strings).
func (f *fixture) checkInvariant(key string) {
	f.t.Helper()
	h := f.budgetHash(key)
	lhs := bigOf(f.t, h["remaining"])
	rhs := new(big.Int).Sub(bigOf(f.t, h["allocated"]), bigOf(f.t, h["spent"]))
	rhs.Sub(rhs, bigOf(f.t, h["reserved"]))
	rhs.Sub(rhs, bigOf(f.t, h["debt"]))
	if lhs.Cmp(rhs) != 0 {
		f.t.Fatalf("ledger invariant broken on %s: %v", key, h)
	}
	if bigOf(f.t, h["reserved"]).Sign() < 0 {
		f.t.Fatalf("negative reserved on %s: %v", key, h)
	}
}
