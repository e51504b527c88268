package script

import (
	"context"
	"errors"
	"fmt"
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

// StreamEntry is one stream entry as a script returns it: {id, f}, its fields
// as an object (lua/events/read.lua and find.lua, lua/overview/tenant.lua).
type StreamEntry struct {
	ID string            `json:"id"`
	F  map[string]string `json:"f"`
}

// StreamPage is a page of a stream read by ReadStream.
type StreamPage struct {
	// Now is Redis TIME when the page was read.
	Now time.Time
	// Len is the stream's length (XLEN).
	Len int64
	// Entries are the page's entries, oldest first.
	Entries []redis.XMessage
}

// ReadStream returns up to count entries of stream after entry id after
// ("" = from the first), with the stream's length and Redis TIME, as one
// pipeline (TIME, XLEN, XRANGE): one round trip, no script. A read-only
// page needs no atomicity a script would give (the length and the page
// are each exact; the archiver that reads its queue this way is the only
// one to trim it), and a script's XRANGE reply is turned into Lua values and
// back, which cost Redis more than the XRANGE itself (BENCHMARKS.md, "Redis
// cost per archived settle"). On a Cluster, TIME (a keyless command) may be
// answered by another master than the stream's: still Redis's clock, off by
// the masters' clock skew at most.
func (e *Executor) ReadStream(ctx context.Context, stream, after string, count int64) (StreamPage, error) {
	if count < 1 {
		return StreamPage{}, fmt.Errorf("read %s: count %d must be positive", stream, count)
	}
	start := "-"
	if after != "" {
		if _, _, ok := ParseStreamID(after); !ok {
			return StreamPage{}, fmt.Errorf("read %s: %q is no stream id", stream, after)
		}
		start = "(" + after
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	var (
		now     *redis.TimeCmd
		length  *redis.IntCmd
		entries *redis.XMessageSliceCmd
	)
	_, err := e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		length = p.XLen(ctx, stream)
		entries = p.XRangeN(ctx, stream, start, "+", count)
		return nil
	})
	if err != nil {
		return StreamPage{}, classify("read "+stream, err)
	}
	return StreamPage{Now: now.Val(), Len: length.Val(), Entries: entries.Val()}, nil
}
