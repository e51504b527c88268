package redistest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestClusterSpreadsSlots(t *testing.T) {
	c := StartCluster(t, 3)
	cl := c.Client(t)
	ctx := context.Background()
	nodes := map[string]bool{}
	for _, k := range []string{"cy:{t:a}:x", "cy:{t:b}:x", "cy:{t:c}:x", "cy:{t:d}:x", "cy:{t:e}:x", "cy:{t:f}:x"} {
		if err := cl.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		slot, err := cl.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		nodes[keyNode(slot)] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("tenant keys all landed on one third of the slot space: %v", nodes)
	}
}

// keyNode buckets a slot into the thirds redis-cli assigns to 3 masters.
func keyNode(slot int64) string {
	switch {
	case slot < 5461:
		return "a"
	case slot < 10923:
		return "b"
	default:
		return "c"
	}
}

func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("sentinel failover in -short mode")
	}
	s := StartSentinel(t)
	c := s.Client(t)
	ctx := context.Background()
	if err := c.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Master.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := c.Set(ctx, "k", "after", 0).Err()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v, _ := c.Get(ctx, "k").Result(); v != "after" {
		t.Fatalf("k = %q after failover", v)
	}
}

// TestSharedClientFollowsEnv guards the cluster run of the suites: with
// CYCLES_TEST_REDIS=cluster they must really talk to a Cluster.
func TestSharedClientFollowsEnv(t *testing.T) {
	c := SharedClient(t)
	_, isCluster := c.(*redis.ClusterClient)
	if isCluster != OnCluster() {
		t.Fatalf("SharedClient is %T with %s=%q", c, ClusterEnv, os.Getenv(ClusterEnv))
	}
	if OnCluster() {
		info, err := c.ClusterInfo(context.Background()).Result()
		if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Fatalf("want a 3-node cluster: %v %s", err, info)
		}
	}
}
