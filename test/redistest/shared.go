package redistest

import (
	"os"
	"sync"
)

// Lazy is the one server of a kind that a test binary shares (the
// redis-server here, PostgreSQL in test/pgtest): started on first use in a
// fresh temporary directory, stopped and its directory removed by Stop after
// the tests. A failed start is kept, so later callers fail at once instead of
// each paying for another attempt.
type Lazy[S any] struct {
	mu  sync.Mutex
	s   *S
	dir string
	err error
}

// Get returns the server, starting it on first use with start, given a new
// directory named after pattern (os.MkdirTemp); the directory is removed
// again when start fails.
func (l *Lazy[S]) Get(pattern string, start func(dir string) (*S, error)) (*S, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s == nil && l.err == nil {
		dir, err := os.MkdirTemp("", pattern)
		if err != nil {
			l.err = err
		} else if l.s, l.err = start(dir); l.err != nil {
			l.s = nil
			_ = os.RemoveAll(dir)
		} else {
			l.dir = dir
		}
	}
	return l.s, l.err
}

// Stop stops the server with stop, if it was started, removes its directory
// and forgets a failed start.
func (l *Lazy[S]) Stop(stop func(*S)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.s != nil {
		stop(l.s)
		_ = os.RemoveAll(l.dir)
		l.s = nil
	}
	l.err = nil
}
