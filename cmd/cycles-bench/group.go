package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cyclesgo/cycles-go/bench"
	cyclesv1 "github.com/cyclesgo/cycles-go/gen/cycles/v1"
	"github.com/cyclesgo/cycles-go/internal/auth"
	"github.com/cyclesgo/cycles-go/internal/ledger"
)

// Workload constants: every reservation holds estimate and commits actual,
// so a commit never creates debt and the ledger totals are exact sums.
const (
	estimate  = 1000
	actual    = 700
	ttlMs     = 3_600_000 // nothing expires while the run lasts
	callLimit = 10 * time.Second
)

// group is one (shape, clients) combination: its own tenant, API key and
// budgets, the workers' ledger bookkeeping, and the gRPC connections.
type group struct {
	b       *runner
	shape   string
	clients int
	tenant  string
	key     string
	conns   []*grpc.ClientConn
	rt      []cyclesv1.RuntimeServiceClient
	rl      []cyclesv1.RateLimitServiceClient
	ctxs    []context.Context // per worker: API key metadata
	cj      *connectReserver  // the connect op's client (nil without an HTTP listener)
	workers []*workerLedger
	// led, when set, settles in process through internal/ledger (the same
	// scripts, no transport: cycles-bench archive -load ledger) instead of
	// over gRPC; ctxs then carry the tenant's principal.
	led *ledger.Ledger
}

// workerLedger is what one worker's successful calls imply for its budgets.
type workerLedger struct {
	subject  *cyclesv1.Subject
	reserved int64    // estimates of reservations still ACTIVE
	spent    int64    // actual charged by commits
	pool     []string // ACTIVE reservation ids from the reserve phase (commit phase input)
	seq      int64    // idempotency key sequence
	// pending are mutations whose response was lost (deadline, transport):
	// they are retried with the same idempotency key before the check.
	pending []pendingCall
	keyBuf  []byte
}

type pendingCall struct {
	reserve *cyclesv1.CreateReservationRequest
	commit  *cyclesv1.CommitReservationRequest
}

func (w *workerLedger) nextKey(prefix string, worker int) string {
	w.seq++
	b := w.keyBuf[:0]
	b = append(b, prefix...)
	b = strconv.AppendInt(b, int64(worker), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, w.seq, 10)
	w.keyBuf = b
	return string(b)
}

// budgetPaths are the budgets of worker w: tenant, workspace, agent.
func (g *group) budgetPaths(w int) []string {
	t := "tenant:" + g.tenant
	if g.shape == "shared" {
		return []string{t, t + "/workspace:bench", t + "/workspace:bench/agent:shared"}
	}
	ws := t + "/workspace:w" + strconv.Itoa(w)
	return []string{t, ws, ws + "/agent:a" + strconv.Itoa(w)}
}

func (g *group) subject(w int) *cyclesv1.Subject {
	if g.shape == "shared" {
		return &cyclesv1.Subject{Workspace: "bench", Agent: "shared"}
	}
	return &cyclesv1.Subject{Workspace: "w" + strconv.Itoa(w), Agent: "a" + strconv.Itoa(w)}
}

// newGroup provisions the tenant, key and budgets through the AdminService
// and opens the connections.
func (b *runner) newGroup(ctx context.Context, shape string, clients int) (*group, error) {
	return b.newGroupNamed(ctx, fmt.Sprintf("bench-%s-%s-%d", b.runID, shape[:3], clients), shape, clients)
}

func (b *runner) newGroupNamed(ctx context.Context, tenant, shape string, clients int) (*group, error) {
	g := &group{b: b, shape: shape, clients: clients, tenant: tenant}
	key, err := b.provisionTenant(ctx, g.tenant)
	if err != nil {
		return nil, err
	}
	g.key = key
	paths := map[string]bool{}
	for w := 0; w < clients; w++ {
		for _, p := range g.budgetPaths(w) {
			paths[p] = true
		}
	}
	if err := b.createBudgets(ctx, g.tenant, keysOf(paths)); err != nil {
		return nil, err
	}
	n := b.cfg.conns
	if n <= 0 || n > clients {
		n = clients
	}
	for i := 0; i < n; i++ {
		c, err := b.dial()
		if err != nil {
			g.close()
			return nil, err
		}
		g.conns = append(g.conns, c)
		g.rt = append(g.rt, cyclesv1.NewRuntimeServiceClient(c))
		g.rl = append(g.rl, cyclesv1.NewRateLimitServiceClient(c))
	}
	if b.httpBase != "" {
		g.cj = newConnectReserver(b.httpBase, clients)
	}
	for w := 0; w < clients; w++ {
		g.ctxs = append(g.ctxs, metadata.NewOutgoingContext(ctx, metadata.Pairs(auth.APIKeyHeader, key)))
		g.workers = append(g.workers, &workerLedger{subject: g.subject(w)})
	}
	return g, nil
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (g *group) close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
}

func (g *group) runtime(w int) cyclesv1.RuntimeServiceClient { return g.rt[w%len(g.rt)] }

// createReservation and commitReservation send one call of worker w over
// gRPC, or run it in process when the group has a ledger.
func (g *group) createReservation(ctx context.Context, w int, req *cyclesv1.CreateReservationRequest) (*cyclesv1.CreateReservationResponse, error) {
	if g.led != nil {
		return g.led.Reserve(ctx, g.tenant, req)
	}
	return g.runtime(w).CreateReservation(ctx, req)
}

func (g *group) commitReservation(ctx context.Context, w int, req *cyclesv1.CommitReservationRequest) (*cyclesv1.CommitReservationResponse, error) {
	if g.led != nil {
		return g.led.Commit(ctx, g.tenant, req)
	}
	return g.runtime(w).CommitReservation(ctx, req)
}

func (g *group) reserveReq(w int) *cyclesv1.CreateReservationRequest {
	wl := g.workers[w]
	return &cyclesv1.CreateReservationRequest{
		IdempotencyKey: wl.nextKey("r", w),
		Subject:        wl.subject,
		Action:         &cyclesv1.Action{Kind: "llm.completion", Name: "bench-model"},
		Estimate:       &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: estimate},
		TtlMs:          ptr(int64(ttlMs)),
	}
}

func ptr[T any](v T) *T { return &v }

func (g *group) call(w int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.ctxs[w], callLimit)
}

// reserve creates one reservation; keep=true puts it in the worker's pool.
func (g *group) reserve(ctx context.Context, w int, keep bool) (string, error) {
	req := g.reserveReq(w)
	cctx, cancel := g.call(w)
	defer cancel()
	res, err := g.createReservation(cctx, w, req)
	wl := g.workers[w]
	if err != nil {
		if ambiguous(err) {
			wl.pending = append(wl.pending, pendingCall{reserve: req})
		}
		return "", err
	}
	wl.reserved += estimate
	if keep {
		wl.pool = append(wl.pool, res.GetReservationId())
	}
	return res.GetReservationId(), nil
}

func (g *group) commit(ctx context.Context, w int, id string) error {
	wl := g.workers[w]
	req := &cyclesv1.CommitReservationRequest{
		ReservationId:  id,
		IdempotencyKey: wl.nextKey("c", w),
		Actual:         &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: actual},
	}
	cctx, cancel := g.call(w)
	defer cancel()
	res, err := g.commitReservation(cctx, w, req)
	if err != nil {
		if ambiguous(err) {
			wl.pending = append(wl.pending, pendingCall{commit: req})
		}
		return err
	}
	wl.reserved -= estimate
	wl.spent += res.GetCharged().GetAmount()
	return nil
}

// ops of the phases.

func (g *group) opReserve(ctx context.Context, w int) (string, error) {
	_, err := g.reserve(ctx, w, true)
	return "", err
}

func (g *group) opCommit(ctx context.Context, w int) (string, error) {
	wl := g.workers[w]
	if len(wl.pool) == 0 {
		return "", errDone
	}
	id := wl.pool[len(wl.pool)-1]
	wl.pool = wl.pool[:len(wl.pool)-1]
	return "", g.commit(ctx, w, id)
}

// opCommitAfter is the commit cell's op: from measureFrom on it commits the
// reserve cell's reservations (opCommit); before, in the cell's warm-up, it
// runs a whole reserve + commit, so a warm-up quicker than the reserve cell
// was (a loaded machine) cannot drain the pool before the measured window.
func (g *group) opCommitAfter(measureFrom time.Time) opFunc {
	return func(ctx context.Context, w int) (string, error) {
		if time.Now().Before(measureFrom) {
			return g.opLifecycle(ctx, w)
		}
		return g.opCommit(ctx, w)
	}
}

func (g *group) opLifecycle(ctx context.Context, w int) (string, error) {
	id, err := g.reserve(ctx, w, false)
	if err != nil {
		return "", err
	}
	return "", g.commit(ctx, w, id)
}

func (g *group) opDecide(ctx context.Context, w int) (string, error) {
	wl := g.workers[w]
	cctx, cancel := g.call(w)
	defer cancel()
	res, err := g.runtime(w).Decide(cctx, &cyclesv1.DecideRequest{
		IdempotencyKey: wl.nextKey("d", w),
		Subject:        wl.subject,
		Action:         &cyclesv1.Action{Kind: "llm.completion", Name: "bench-model"},
		Estimate:       &cyclesv1.Amount{Unit: cyclesv1.Unit_UNIT_TOKENS, Amount: estimate},
	})
	if err != nil {
		return "", err
	}
	return res.GetDecision().String(), nil
}

// rateKey is the limiter key of worker w: one key for every worker on the
// shared shape, one per worker on the independent shape.
func (g *group) rateKey(w int) string {
	if g.shape == "shared" {
		return "shared"
	}
	return "k" + strconv.Itoa(w)
}

func (g *group) opRateLimit(policy string) opFunc {
	keys := make([]string, g.clients)
	for w := range keys {
		keys[w] = g.rateKey(w)
	}
	return func(ctx context.Context, w int) (string, error) {
		cctx, cancel := g.call(w)
		defer cancel()
		res, err := g.rl[w%len(g.rl)].Check(cctx, &cyclesv1.CheckRequest{Policy: policy, Key: keys[w], Hits: 1})
		if err != nil {
			return "", err
		}
		if res.GetAllowed() {
			return "allowed", nil
		}
		return "denied", nil
	}
}

// reconcile retries every lost-response mutation with its idempotency key
// (a replay answers with the original outcome, or the call happens now), so
// the ledger check compares exact totals. Returns how many were resolved
// and an error describing any that stayed unresolved.
func (g *group) reconcile(ctx context.Context) (int, []string) {
	var (
		mu       sync.Mutex
		resolved int
		problems []string
	)
	var wg sync.WaitGroup
	for w := range g.workers {
		wl := g.workers[w]
		if len(wl.pending) == 0 {
			continue
		}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			pend := wl.pending
			wl.pending = nil
			for _, p := range pend {
				var err error
				for attempt := 0; attempt < 5; attempt++ {
					cctx, cancel := g.call(w)
					switch {
					case p.reserve != nil:
						_, err = g.createReservation(cctx, w, p.reserve)
						if err == nil {
							wl.reserved += estimate
						}
					case p.commit != nil:
						var res *cyclesv1.CommitReservationResponse
						res, err = g.commitReservation(cctx, w, p.commit)
						if err == nil {
							wl.reserved -= estimate
							wl.spent += res.GetCharged().GetAmount()
						}
					}
					cancel()
					if err == nil || !ambiguous(err) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				if err == nil {
					resolved++
				} else if ambiguous(err) {
					problems = append(problems, fmt.Sprintf("worker %d: a lost-response call could not be resolved: %v", w, err))
				} else {
					// A definite refusal on retry: the first attempt did not
					// apply either (refusals change nothing), nothing to count.
					resolved++
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	return resolved, problems
}

// verify compares each budget's Redis totals (through AdminService
// GetBudget) with the sums the successful calls imply.
func (g *group) verify(ctx context.Context) bench.LedgerCheck {
	chk := bench.LedgerCheck{Group: g.tenant}
	resolved, problems := g.reconcile(ctx)
	chk.Reconciled = resolved
	chk.Details = append(chk.Details, problems...)
	chk.Mismatches += len(problems)

	type want struct{ reserved, spent int64 }
	exp := map[string]*want{}
	for w, wl := range g.workers {
		for _, p := range g.budgetPaths(w) {
			e := exp[p]
			if e == nil {
				e = &want{}
				exp[p] = e
			}
			e.reserved += wl.reserved
			e.spent += wl.spent
		}
	}
	for path, e := range exp {
		chk.Budgets++
		got, err := g.b.getBudget(ctx, g.tenant, path)
		if err != nil {
			chk.Mismatches++
			chk.Details = append(chk.Details, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		wantRemaining := g.b.cfg.allocated - e.reserved - e.spent
		if got.GetReserved() != e.reserved || got.GetSpent() != e.spent || got.GetRemaining() != wantRemaining || got.GetDebt() != 0 {
			chk.Mismatches++
			chk.Details = append(chk.Details, fmt.Sprintf("%s: redis reserved=%d spent=%d remaining=%d debt=%d; calls imply reserved=%d spent=%d remaining=%d debt=0",
				path, got.GetReserved(), got.GetSpent(), got.GetRemaining(), got.GetDebt(), e.reserved, e.spent, wantRemaining))
		}
	}
	return chk
}
