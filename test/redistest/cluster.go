package redistest

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// startSharedCluster starts the per-binary cluster of SharedClient. Main
// stops it and removes its dirs after the tests (StopShared); its processes
// also die with the test binary (Pdeathsig).
func startSharedCluster(tb testing.TB) *Cluster {
	c, err := newCluster(3, func() (string, error) { return os.MkdirTemp("", "cycles-cluster-") }, func() int { return FreePort(tb) })
	if err != nil {
		tb.Logf("start shared cluster: %v", err)
		if c != nil {
			for _, s := range c.Masters {
				s.Stop()
				_ = os.RemoveAll(s.Dir)
			}
		}
		return nil
	}
	return c
}

// StartCluster starts n (>= 3) masters with cluster mode on, joins them with
// `redis-cli --cluster create`, waits until the cluster reports ok, and stops
// them at cleanup. In -short mode it skips the calling test instead: the
// start-up takes seconds, so every test (or leg) needing a cluster of its
// own is left out of short runs the same way.
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("cluster start-up in -short mode")
	}
	c, err := newCluster(n, func() (string, error) { return tb.TempDir(), nil }, func() int { return FreePort(tb) })
	if c != nil {
		for _, m := range c.Masters {
			tb.Cleanup(m.Stop)
		}
	}
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func newCluster(n int, dir func() (string, error), port func() int) (*Cluster, error) {
	if n < 3 {
		n = 3
	}
	c := &Cluster{}
	addrs := make([]string, 0, n)
	for i := 0; i < n; i++ {
		d, err := dir()
		if err != nil {
			return c, err
		}
		s, err := StartProcess(d, port(), Options{Args: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
		}})
		if err != nil {
			_ = os.RemoveAll(d)
			return c, fmt.Errorf("start cluster node: %w", err)
		}
		c.Masters = append(c.Masters, s)
		addrs = append(addrs, s.Addr)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return c, fmt.Errorf("redis-cli not found: %w", err)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		return c, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	return c, c.waitOK(15 * time.Second)
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
				if err == nil {
					err = errors.New("cluster_state is not ok")
				}
				return fmt.Errorf("cluster node %s not ok: %w %s", m.Addr, err, info)
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
