package script

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ReadHashes returns every field of each hash in keys (HGETALL), in keys'
// order, sent as one pipeline: one round trip, no script. An absent key
// gives an empty map. Each HGETALL is atomic on its own; the reads are not
// one snapshot together, so it is for hashes that no longer change (the
// archiver's settled records). Keys should share one hash tag (one tenant):
// on Cluster the pipeline then goes to one node in one round trip.
//
// Why not a script: a script's HGETALL reply is turned into Lua values and
// back into RESP, about half of Redis's work for a record that is only read
// (BENCHMARKS.md, "Redis cost per archived settle").
func (e *Executor) ReadHashes(ctx context.Context, keys []string) ([]map[string]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := e.bounded(ctx)
	defer cancel()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	_, err := e.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HGetAll(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, classify(fmt.Sprintf("HGETALL x%d", len(keys)), err)
	}
	out := make([]map[string]string, len(keys))
	for i, c := range cmds {
		m, err := c.Result()
		if err != nil {
			return nil, classify("HGETALL "+keys[i], err)
		}
		out[i] = m
	}
	return out, nil
}
