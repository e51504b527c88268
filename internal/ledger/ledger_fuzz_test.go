package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/scope"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/internal/validate"
	"github.com/cyclesgo/cycles-go/test/errtest"
	"github.com/cyclesgo/cycles-go/test/property/hashslot"
)

// errCaptured stops a command after the capture hook recorded it: the fuzz
// target needs the EVALSHA the ledger would send, not a server.
var errCaptured = errors.New("captured (no server)")

// scriptCall is one EVALSHA as the client would send it.
type scriptCall struct {
	keys []string
	argv []string
}

// captureHook records every script call and answers none of them.
type captureHook struct {
	mu    sync.Mutex
	calls []scriptCall
}

func (h *captureHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *captureHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *captureHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) >= 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			n, _ := strconv.Atoi(fmt.Sprint(args[2]))
			var c scriptCall
			for i, a := range args[3:] {
				if i < n {
					c.keys = append(c.keys, fmt.Sprint(a))
				} else {
					c.argv = append(c.argv, fmt.Sprint(a))
				}
			}
			h.mu.Lock()
			h.calls = append(h.calls, c)
			h.mu.Unlock()
		}
		cmd.SetErr(errCaptured)
		return errCaptured
	}
}

func (h *captureHook) take() []scriptCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.calls
	h.calls = nil
	return c
}

// FuzzScriptKeys drives every tenant-scoped ledger operation with fuzzed
// requests and captures the EVALSHA each would send. For a tenant id that
// authentication accepts and a request that validation accepts, every key in
// KEYS carries exactly the tenant's hash tag (one Cluster slot, whatever the
// ids, idempotency keys and subject values), the budget keys are those of
// the derived scopes in canonical order, and amounts travel as their exact
// decimal strings. Nothing panics, whatever the input.
func FuzzScriptKeys(f *testing.F) {
	f.Add("acme", "r-1", "7d9f0c2e-8a4b-4c1d-9e2f-0123456789ab", "Prod", "", "", "bot", "", int32(2), int64(500), int32(1), int64(60_000))
	f.Add("a", "k", "r", "", "", "", "", "s", int32(1), int64(9223372036854775807), int32(3), int64(1000))
	f.Add("t_1.x-y", "{t:other}", "}{", "w", "a", "wf", "ag", "ts", int32(4), int64(9007199254740993), int32(0), int64(86_400_000))
	f.Add("acme", "x", "y", "a/b", "", "", "", "", int32(9), int64(-1), int32(7), int64(0))

	l, hook := captureLedger(f)
	f.Fuzz(func(t *testing.T, tenant, idem, rid, ws, app, wf, agent, toolset string, unit int32, amount int64, policy int32, ttl int64) {
		checkScriptKeys(t, l, hook, tenant, idem, rid, ws, app, wf, agent, toolset, unit, amount, policy, ttl)
	})
}

// captureLedger is a Ledger whose client records script calls instead of
// sending them.
func captureLedger(tb testing.TB) (*Ledger, *captureHook) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	tb.Cleanup(func() { _ = client.Close() })
	hook := &captureHook{}
	client.AddHook(hook)
	exec, err := script.New(client)
	if err != nil {
		tb.Fatal(err)
	}
	l := New(exec, Options{})
	l.newID = func() string { return "00000000-0000-4000-8000-000000000001" }
	return l, hook
}

// checkScriptKeys runs every operation with the inputs and checks the script
// calls of the accepted ones; it returns how many were checked.
func checkScriptKeys(t *testing.T, l *Ledger, hook *captureHook, tenant, idem, rid, ws, app, wf, agent, toolset string,
	unit int32, amount int64, policy int32, ttl int64) (checked int) {
	t.Helper()
	{
		ctx := context.Background()
		subj := &cyclesv1.Subject{Workspace: ws, App: app, Workflow: wf, Agent: agent, Toolset: toolset}
		action := &cyclesv1.Action{Kind: "llm.completion", Name: "m"}
		amt := &cyclesv1.Amount{Unit: cyclesv1.Unit(unit), Amount: amount}
		pol := cyclesv1.CommitOveragePolicy(policy)
		ops := []struct {
			req proto.Message
			run func() error
		}{}
		add := func(req proto.Message, run func() error) {
			ops = append(ops, struct {
				req proto.Message
				run func() error
			}{req, run})
		}
		reserve := &cyclesv1.CreateReservationRequest{IdempotencyKey: idem, Subject: subj, Action: action, Estimate: amt, TtlMs: &ttl, OveragePolicy: pol}
		add(reserve, func() error { return errtest.ErrOf(l.Reserve(ctx, tenant, reserve)) })
		dry := proto.Clone(reserve).(*cyclesv1.CreateReservationRequest)
		dry.DryRun = true
		add(dry, func() error { return errtest.ErrOf(l.Reserve(ctx, tenant, dry)) })
		decide := &cyclesv1.DecideRequest{IdempotencyKey: idem, Subject: subj, Action: action, Estimate: amt}
		add(decide, func() error { return errtest.ErrOf(l.Decide(ctx, tenant, decide)) })
		commit := &cyclesv1.CommitReservationRequest{ReservationId: rid, IdempotencyKey: idem, Actual: amt}
		add(commit, func() error { return errtest.ErrOf(l.Commit(ctx, tenant, commit)) })
		release := &cyclesv1.ReleaseReservationRequest{ReservationId: rid, IdempotencyKey: idem}
		add(release, func() error { return errtest.ErrOf(l.Release(ctx, tenant, release)) })
		extend := &cyclesv1.ExtendReservationRequest{ReservationId: rid, IdempotencyKey: idem, ExtendByMs: ttl}
		add(extend, func() error { return errtest.ErrOf(l.Extend(ctx, tenant, extend)) })
		event := &cyclesv1.CreateEventRequest{IdempotencyKey: idem, Subject: subj, Action: action, Actual: amt, OveragePolicy: pol}
		add(event, func() error { return errtest.ErrOf(l.CreateEvent(ctx, tenant, event)) })
		get := &cyclesv1.GetReservationRequest{ReservationId: rid}
		add(get, func() error { return errtest.ErrOf(l.Get(ctx, tenant, get)) })
		list := &cyclesv1.ListReservationsRequest{IdempotencyKey: idem, Workspace: ws, Agent: agent}
		add(list, func() error { return errtest.ErrOf(l.List(ctx, tenant, list)) })
		bal := &cyclesv1.GetBalancesRequest{Workspace: ws, App: app, Agent: agent}
		add(bal, func() error { return errtest.ErrOf(l.Balances(ctx, tenant, bal)) })
		// Fuzzed cursors (decoded in Go; mostly refused before any script).
		listAt := &cyclesv1.ListReservationsRequest{Workspace: ws, Cursor: rid}
		add(listAt, func() error { return errtest.ErrOf(l.List(ctx, tenant, listAt)) })
		balAt := &cyclesv1.GetBalancesRequest{Workspace: ws, Cursor: rid}
		add(balAt, func() error { return errtest.ErrOf(l.Balances(ctx, tenant, balAt)) })

		tenantOK := auth.ValidTenantID(tenant)
		wantTag := "t:" + tenant
		wantSlot := hashslot.Slot(keys.Tenant(tenant).Prefix())
		for _, op := range ops {
			name := op.req.ProtoReflect().Descriptor().Name()
			accepted := validate.Message(op.req) == nil
			if !tenantOK || !accepted {
				// Authentication or validation refuses it before the
				// ledger; calling it anyway must still not panic.
				_ = op.run()
				hook.take()
				continue
			}
			err := op.run()
			calls := hook.take()
			if err != nil && !errors.Is(err, errCaptured) && len(calls) == 0 {
				continue // refused in Go before any script (e.g. FORBIDDEN, bad cursor)
			}
			for _, c := range calls {
				for _, k := range c.keys {
					if hashslot.Tag(k) != wantTag || hashslot.Slot(k) != wantSlot {
						t.Fatalf("%s: key %q leaves tenant %q's slot %d (keys %q)", name, k, tenant, wantSlot, c.keys)
					}
				}
			}
			if len(calls) != 1 {
				t.Fatalf("%s: %d script calls, want exactly one EVALSHA", name, len(calls))
			}
			checkArgs(t, tenant, op.req, calls[0])
			checked++
		}
	}
	return checked
}

// The fuzz target is not vacuous: with valid inputs every operation reaches
// its script and is checked, and a key outside the slot would be caught.
func TestScriptKeysChecksEveryOperation(t *testing.T) {
	l, hook := captureLedger(t)
	if n := checkScriptKeys(t, l, hook, "acme", "k-1", "r-1", "Prod", "app", "", "bot", "", int32(cyclesv1.Unit_UNIT_TOKENS),
		500, int32(cyclesv1.CommitOveragePolicy_COMMIT_OVERAGE_POLICY_REJECT), 60_000); n != 10 {
		t.Fatalf("%d operations checked, want all 10", n)
	}
	if hashslot.Slot(keys.Tenant("acme").Prefix()) == hashslot.Slot("cy:{t:acme2}:r:x") {
		t.Fatal("slot check cannot tell two tenants apart")
	}
}

// checkArgs checks the argument encoding of the scripts that move money
// (positions from the script headers in lua/ledger).
func checkArgs(t *testing.T, tenant string, req proto.Message, c scriptCall) {
	t.Helper()
	tn := keys.Tenant(tenant)
	budgetKeys := func(subj *cyclesv1.Subject, unit cyclesv1.Unit, from int) {
		d, err := scope.Derive(tenant, subj)
		if err != nil {
			t.Fatalf("derive after a script call: %v", err)
		}
		if len(c.keys) != from+len(d.Affected) {
			t.Fatalf("%d keys, want %d + one budget key per affected scope %q", len(c.keys), from, d.Affected)
		}
		for i, s := range d.Affected {
			if want := tn.Budget(s, scope.UnitKey(unit)); c.keys[from+i] != want {
				t.Fatalf("budget key %d = %q, want %q", i, c.keys[from+i], want)
			}
		}
	}
	argv := func(i int, want string) {
		if i > len(c.argv) || c.argv[i-1] != want {
			t.Fatalf("%T ARGV[%d]: want %q (argv %q)", req, i, want, c.argv)
		}
	}
	switch r := req.(type) {
	case *cyclesv1.CreateReservationRequest:
		budgetKeys(r.GetSubject(), r.GetEstimate().GetUnit(), 9)
		argv(3, scope.UnitKey(r.GetEstimate().GetUnit()))
		argv(4, strconv.FormatInt(r.GetEstimate().GetAmount(), 10))
		argv(8, r.GetIdempotencyKey())
		if c.keys[7] != tn.Idempotency("reserve", r.GetIdempotencyKey()) {
			t.Fatalf("reserve idempotency key %q", c.keys[7])
		}
	case *cyclesv1.CreateEventRequest:
		budgetKeys(r.GetSubject(), r.GetActual().GetUnit(), 6)
		argv(2, scope.UnitKey(r.GetActual().GetUnit()))
		argv(3, strconv.FormatInt(r.GetActual().GetAmount(), 10))
	case *cyclesv1.CommitReservationRequest:
		argv(1, r.GetReservationId())
		argv(3, strconv.FormatInt(r.GetActual().GetAmount(), 10))
		if c.keys[2] != tn.Reservation(r.GetReservationId()) {
			t.Fatalf("commit reservation key %q", c.keys[2])
		}
	case *cyclesv1.ExtendReservationRequest:
		argv(2, strconv.FormatInt(r.GetExtendByMs(), 10))
	}
}
