package script

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// WaitStream blocks until stream holds an entry after id `after`, or block
// passes, and returns the first such entry's id ("" when none came). It is
// one XREAD COUNT 1 BLOCK, the only blocking command cyclesd sends: a Lua
// script cannot block, and waking on an append instead of polling is what
// keeps an idle feed subscriber cheap (internal/events/doc.go). The call holds one
// pooled connection for up to block, so callers share one waiter per
// process; ctx bounds it (a deadline a little past block is expected).
func (e *Executor) WaitStream(ctx context.Context, stream, after string, block time.Duration) (string, error) {
	if block < time.Millisecond {
		block = time.Millisecond
	}
	res, err := e.client.XRead(ctx, &redis.XReadArgs{Streams: []string{stream, after}, Count: 1, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", classify("XREAD "+stream, err)
	}
	for _, s := range res {
		if len(s.Messages) > 0 {
			return s.Messages[0].ID, nil
		}
	}
	return "", nil
}

// ParseStreamID splits a stream entry id "<ms>-<seq>".
func ParseStreamID(id string) (ms, seq uint64, ok bool) {
	a, b, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	ms, err1 := strconv.ParseUint(a, 10, 64)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	return ms, seq, err1 == nil && err2 == nil
}
