package events

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// tails tells idle watchers that their tenant's log grew. One goroutine per
// watched tenant (per process) polls the stream's newest id and wakes every
// waiting watcher by closing a channel, so N idle watchers of a tenant cost
// one cheap read per poll interval, and a slow watcher never delays the
// others: nothing is ever sent to a watcher, it re-reads at its own pace.
type tails struct {
	r        reader
	interval time.Duration
	log      *zap.Logger

	mu sync.Mutex
	m  map[string]*tail
}

type tail struct {
	refs    int
	known   bool
	last    ID
	changed chan struct{}
	stop    context.CancelFunc
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newTails(r reader, interval time.Duration, log *zap.Logger) *tails {
	return &tails{r: r, interval: interval, log: log, m: map[string]*tail{}}
}

// acquire registers a watcher of tenant, starting its poller if needed.
func (h *tails) acquire(tenant string) *tail {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.m[tenant]
	if t == nil {
		ctx, cancel := context.WithCancel(context.Background())
		t = &tail{changed: make(chan struct{}), stop: cancel}
		h.m[tenant] = t
		go h.poll(ctx, tenant, t)
	}
	t.refs++
	return t
}

// release drops a watcher; the last one stops the poller.
func (h *tails) release(tenant string, t *tail) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t.refs--
	if t.refs == 0 {
		t.stop()
		delete(h.m, tenant)
	}
}

// after returns a channel that is closed once the log is known to hold an
// event after id (already closed if it is known now).
func (h *tails) after(t *tail, id ID) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.known && id.Less(t.last) {
		return closedCh
	}
	return t.changed
}

func (h *tails) poll(ctx context.Context, tenant string, t *tail) {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for {
		w, err := h.r.read(ctx, tenant, "+", "+", 1)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				h.log.Debug("event tail poll failed", zap.String("tenant", tenant), zap.Error(err))
			}
		case w.Last != "":
			if id, perr := ParseID(w.Last); perr == nil {
				h.mu.Lock()
				if !t.known || t.last != id {
					t.known, t.last = true, id
					close(t.changed)
					t.changed = make(chan struct{})
				}
				h.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
