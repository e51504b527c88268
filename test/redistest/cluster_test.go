package redistest

import (
	"context"
	"testing"
)

func TestClusterSpreadsSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster start-up in -short mode")
	}
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
