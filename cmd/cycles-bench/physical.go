package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/bench"
)

// physicalScript is the smallest script with a 3-scope reserve's atomic
// shape: Redis TIME, a SET NX idempotency record, a read of three budgets
// (HMGET) with a sufficiency check, two HINCRBY per budget, one record HSET
// and one index ZADD. It is the physical limit a reserve script could reach
// on this Redis; the protocol's reserve does more (tenant guard, exact
// int64 arithmetic, caps, policies, a replayable answer, three indexes).
//
// KEYS: 1 idempotency key  2..4 budget hashes  5 record hash  6 index
// ARGV: 1 reservation id   2 amount
// Result: 1 reserved, 0 replay, -1 insufficient.
const physicalScript = `
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', 86400000) then return 0 end
local amt = tonumber(ARGV[2])
for i = 2, 4 do
  local v = redis.call('HMGET', KEYS[i], 'remaining', 'reserved')
  if (tonumber(v[1]) or 0) < amt then return -1 end
end
for i = 2, 4 do
  redis.call('HINCRBY', KEYS[i], 'reserved', amt)
  redis.call('HINCRBY', KEYS[i], 'remaining', -amt)
end
redis.call('HSET', KEYS[5], 'state', 'ACTIVE', 'amount', ARGV[2], 'expires_at', now + 3600000)
redis.call('ZADD', KEYS[6], now + 3600000, ARGV[1])
return 1
`

// runPhysical runs physicalScript with EVALSHA on conns connections (one
// goroutine each, no pipelining) against the same Redis, right after the
// ceiling, and checks its budgets.
func (b *runner) runPhysical(ctx context.Context, conns int) (*bench.Physical, bench.LedgerCheck, error) {
	tag := fmt.Sprintf("{bench-%s-physical}:", b.runID)
	budgets := []string{tag + "b1", tag + "b2", tag + "b3"}
	client := redis.NewClient(&redis.Options{Addr: b.cfg.redisAddr, PoolSize: conns, MinIdleConns: conns})
	defer client.Close()
	for _, k := range budgets {
		if err := client.HSet(ctx, k, "remaining", b.cfg.allocated, "reserved", 0).Err(); err != nil {
			return nil, bench.LedgerCheck{}, err
		}
	}
	sc := redis.NewScript(physicalScript)
	if err := sc.Load(ctx, client).Err(); err != nil {
		return nil, bench.LedgerCheck{}, err
	}
	seq := make([]int64, conns)
	counts := make([]int64, conns)
	op := func(ctx context.Context, w int) (string, error) {
		seq[w]++
		id := strconv.Itoa(w) + "-" + strconv.FormatInt(seq[w], 10)
		cctx, cancel := context.WithTimeout(ctx, callLimit)
		defer cancel()
		v, err := sc.EvalSha(cctx, client, []string{tag + "i:" + id, budgets[0], budgets[1], budgets[2], tag + "r:" + id, tag + "idx"},
			id, estimate).Int64()
		if err != nil {
			return "", err
		}
		if v != 1 {
			return "", fmt.Errorf("physical script answered %d", v)
		}
		counts[w]++
		return "", nil
	}
	pp := b.pids
	pp.server = 0
	res := runPhase(ctx, conns, b.cfg.warmup, b.cfg.duration, pp, op)
	out := &bench.Physical{Conns: conns, Window: res.measured()}
	var ok int64
	for _, c := range counts {
		ok += c
	}
	chk := bench.LedgerCheck{Group: tag + "b*"}
	for _, k := range budgets {
		chk.Budgets++
		v, err := client.HMGet(ctx, k, "remaining", "reserved").Result()
		if err != nil {
			chk.Mismatches++
			chk.Details = append(chk.Details, fmt.Sprintf("%s: %v", k, err))
			continue
		}
		rem, _ := strconv.ParseInt(fmt.Sprint(v[0]), 10, 64)
		res, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		if res != ok*estimate || rem != b.cfg.allocated-ok*estimate {
			chk.Mismatches++
			chk.Details = append(chk.Details, fmt.Sprintf("%s: reserved=%d remaining=%d; %d successful calls imply reserved=%d", k, res, rem, ok, ok*estimate))
		}
	}
	return out, chk, nil
}
