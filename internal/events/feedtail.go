package events

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/cyclesgo/cycles-go/internal/keys"
	"github.com/cyclesgo/cycles-go/internal/script"
)

// feedTail wakes caught-up all-tenant watchers when the feed grows. While
// any watcher waits, one goroutine per process blocks in XREAD BLOCK on the
// feed after the newest entry any watcher has seen (script.WaitStream); an
// append wakes it at once, and an idle feed costs one command per block
// period per process, however many watchers and tenants there are. The
// goroutine stops when nobody waits.
type feedTail struct {
	exec  *script.Executor
	block time.Duration
	log   *zap.Logger

	mu      sync.Mutex
	known   ID // newest feed entry id seen by anyone
	changed chan struct{}
	waiting int
	running bool
}

func newFeedTail(exec *script.Executor, block time.Duration, log *zap.Logger) *feedTail {
	return &feedTail{exec: exec, block: block, log: log, changed: make(chan struct{})}
}

// observe records that the feed holds entries up to id; watchers waiting
// behind it are woken.
func (f *feedTail) observe(id ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance(id)
}

func (f *feedTail) advance(id ID) {
	if f.known.Less(id) {
		f.known = id
		close(f.changed)
		f.changed = make(chan struct{})
	}
}

// wait returns a channel closed once the feed is known to hold an entry after
// id, and a release func the caller must call when it stops waiting.
func (f *feedTail) wait(id ID) (<-chan struct{}, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id.Less(f.known) {
		return closedCh, func() {}
	}
	f.waiting++
	if !f.running {
		f.running = true
		go f.loop()
	}
	var once sync.Once
	return f.changed, func() {
		once.Do(func() {
			f.mu.Lock()
			f.waiting--
			f.mu.Unlock()
		})
	}
}

func (f *feedTail) loop() {
	backoff := 50 * time.Millisecond
	for {
		f.mu.Lock()
		if f.waiting == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		after := f.known
		f.mu.Unlock()
		// Every read has a deadline: the block period plus a margin.
		ctx, cancel := context.WithTimeout(context.Background(), f.block+2*time.Second)
		got, err := f.exec.WaitStream(ctx, keys.Feed, after.String(), f.block)
		cancel()
		if err != nil {
			f.log.Debug("feed wait failed", zap.Error(err))
			time.Sleep(backoff)
			if backoff < time.Second {
				backoff *= 2
			}
			continue
		}
		backoff = 50 * time.Millisecond
		if got == "" {
			continue
		}
		if id, err := ParseID(got); err == nil {
			f.observe(id)
		}
	}
}
