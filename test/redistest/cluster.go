package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster of redis-server processes.
type Cluster struct {
	Masters []*Server
}

// StartCluster starts n (>= 3) masters with cluster mode on, joins them with
// `redis-cli --cluster create`, waits until the cluster reports ok, and stops
// them at cleanup.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if n < 3 {
		n = 3
	}
	c := &Cluster{}
	addrs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		s, err := StartProcess(tb.TempDir(), FreePort(tb), Options{Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
		}})
		if err != nil {
			tb.Fatalf("start cluster node: %v", err)
		}
		tb.Cleanup(s.Stop)
		c.Masters = append(c.Masters, s)
		addrs = append(addrs, s.Addr)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redis-cli not found: %v", err)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(15 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return c
}

// Addrs are the masters' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		out[i] = m.Addr
	}
	return out
}

func (c *Cluster) waitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, m := range c.Masters {
		cl := redis.NewClient(&redis.Options{Addr: m.Addr})
		for {
			info, err := cl.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				_ = cl.Close()
				return fmt.Errorf("cluster node %s not ok: %v %s", m.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cl.Close()
	}
	return nil
}

// Client returns a cluster client, closed at cleanup.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), PoolSize: 32})
	tb.Cleanup(func() { _ = cl.Close() })
	return cl
}
