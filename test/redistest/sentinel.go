package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

// Sentinel is a master, one replica and one sentinel watching them.
type Sentinel struct {
	Master     *Server
	Replica    *Server
	Sentinel   *Server
	MasterName string
}

// StartSentinel starts a master, a replica of it, and a sentinel
// (redis-server --sentinel) with a short down-after so failovers are quick.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	master := Start(tb)
	replica := Start(tb, Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	dir := tb.TempDir()
	port := FreePort(tb)
	conf := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor cycles 127.0.0.1 %d 1
sentinel down-after-milliseconds cycles 1000
sentinel failover-timeout cycles 5000
sentinel parallel-syncs cycles 1
`, port, dir, master.Port)
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		tb.Fatal(err)
	}
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, Port: port, args: []string{path, "--sentinel"}}
	if err := s.spawn(bin); err != nil {
		tb.Fatalf("start sentinel: %v", err)
	}
	tb.Cleanup(s.Stop)
	st := &Sentinel{Master: master, Replica: replica, Sentinel: s, MasterName: "cycles"}
	st.waitReplicaSynced(tb)
	return st
}

func (s *Sentinel) waitReplicaSynced(tb testing.TB) {
	c := redis.NewClient(&redis.Options{Addr: s.Replica.Addr})
	defer c.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, _ := c.Info(context.Background(), "replication").Result()
		if redisinfo.Field(info, "master_link_status") == "up" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("replica never synced: %s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a failover client following the sentinel, closed at cleanup.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.Sentinel.Addr}})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}
