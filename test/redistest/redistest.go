// Package redistest starts the Redis servers the tests run against: real
// redis-server processes (own free port, own temp dir, killed with the test
// binary) and the embedded in-process store used by dev mode.
//
// Suites that must hold on every backend iterate Backends(t): the shared real
// backend in the production mode (Redis 7 Functions, FCALL) and the embedded
// store (EVALSHA, as dev mode). The choice: FCALL is the default real-Redis
// leg, so the domain suites run the code production runs without doubling
// make test; the EVALSHA path on real Redis (Redis 6 deployments) is kept
// where it differs, in the script executor's own suites (AllModes).
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
)

// Server is one redis-server process.
type Server struct {
	Addr string
	Dir  string
	Port int
	cmd  *exec.Cmd
	args []string
}

// Options tune a started server.
type Options struct {
	// Extra redis-server arguments, e.g. "--appendonly", "yes".
	Args []string
}

// FreePort returns a TCP port that was free a moment ago on 127.0.0.1 and
// that no earlier call in this test binary returned.
func FreePort(tb testing.TB) int {
	tb.Helper()
	port, err := Port()
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	return port
}

// handedOut holds the ports Port returned in this process. A port is free
// again once its probe listener closes, and the kernel may hand it straight
// back, before the server it was picked for has bound it: two daemons started
// one after the other then got the same port (seen in TestTwoReplicasShareLoadAndSweep).
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Port returns a TCP port that was free a moment ago on 127.0.0.1 and that it
// has not returned before in this process.
func Port() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no port that was not handed out before in 100 tries")
}

// Binary is the redis-server executable (REDIS_SERVER overrides).
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	return exec.LookPath("redis-server")
}

// Start runs a fresh redis-server for this test and stops it at cleanup.
func Start(tb testing.TB, opts ...Options) *Server {
	tb.Helper()
	s, err := StartProcess(tb.TempDir(), FreePort(tb), opts...)
	if err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartProcess runs redis-server on port with its files in dir.
func StartProcess(dir string, port int, opts ...Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (run `make deps` or apt-get install redis-server): %w", err)
	}
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
		"--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log"),
	}
	for _, o := range opts {
		args = append(args, o.Args...)
	}
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Dir: dir, Port: port, args: args}
	if err := s.spawn(bin); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Server) spawn(bin string) error {
	cmd := exec.Command(bin, s.args...)
	// The server dies with the test binary even if the binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	return s.waitReady(10 * time.Second)
}

func (s *Server) waitReady(timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
			return fmt.Errorf("redis-server on %s not ready: %w\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a client for this server, closed at cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_, _ = s.cmd.Process.Wait()
		s.cmd = nil
	}
}

// Pause freezes the server (SIGSTOP): connections stay open and commands
// already sent run when it resumes, as with a long stall or a GC-like pause.
func (s *Server) Pause() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts the server again on the same port and dir (after Kill).
func (s *Server) Restart() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	return s.spawn(bin)
}

// Stop terminates the server.
func (s *Server) Stop() { s.Kill() }

// shared is the redis-server this test binary shares, stopped by
// StopShared (Main) after the tests.
var shared Lazy[Server]

// Shared returns one redis-server per test binary, for tests that isolate
// themselves by tenant id instead of by server. It is never flushed.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	s, err := shared.Get("cycles-redistest-", func(dir string) (*Server, error) { return StartProcess(dir, FreePort(tb)) })
	if err != nil {
		tb.Fatalf("shared redis-server: %v", err)
	}
	return s
}

// ClusterEnv selects the backend of SharedClient and Backends: set to
// "cluster", the suites run against a local 3-master Redis Cluster (one per
// test binary) instead of a single redis-server. `make test` runs the ledger,
// sweeper, event, limiter and admin suites both ways.
const ClusterEnv = "CYCLES_TEST_REDIS"

// OnCluster reports whether the suites run against a Cluster.
func OnCluster() bool { return os.Getenv(ClusterEnv) == "cluster" }

var (
	// sharedMu guards sharedCluster: started on first use, stopped by
	// StopShared (Main) after the tests.
	sharedMu         sync.Mutex
	sharedCluster    *Cluster
	sharedClusterErr bool
)

// SharedClient is a client of the shared backend (a redis-server, or a
// Cluster when CYCLES_TEST_REDIS=cluster), closed at cleanup. Tests isolate
// themselves by tenant id.
func SharedClient(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	if OnCluster() {
		sharedMu.Lock()
		if sharedCluster == nil && !sharedClusterErr {
			sharedCluster = startSharedCluster(tb)
			sharedClusterErr = sharedCluster == nil
		}
		c := sharedCluster
		sharedMu.Unlock()
		if c == nil {
			tb.Fatal("shared cluster failed to start")
		}
		return c.Client(tb)
	}
	return Shared(tb).Client(tb)
}

// Embedded starts the in-process store dev mode uses (miniredis).
func Embedded(tb testing.TB) *redis.Client {
	tb.Helper()
	c, _ := embedded(tb)
	return c
}

// Clocked starts an embedded store whose clock the test sets, from start:
// Lua's TIME answers m's time and TTLs count down by it (m.SetTime moves it).
func Clocked(tb testing.TB, start time.Time) (c *redis.Client, m *miniredis.Miniredis) {
	tb.Helper()
	c, m = embedded(tb)
	m.SetTime(start)
	m.ClockTTL(true)
	return c, m
}

// embeddedAddrs holds the address of every embedded store open in this
// process (removed when its test ends, before a later server can be handed
// the port), so BackendOn tells an embedded store from a redis-server the way
// internal/store does: by how it was started, not by probing it.
var embeddedAddrs sync.Map

func embedded(tb testing.TB) (*redis.Client, *miniredis.Miniredis) {
	tb.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		tb.Fatalf("embedded store: %v", err)
	}
	tb.Cleanup(m.Close)
	addr := m.Addr()
	embeddedAddrs.Store(addr, true)
	tb.Cleanup(func() { embeddedAddrs.Delete(addr) })
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c, m
}

// Backend is a named client for suites that run on every backend.
type Backend struct {
	Name   string
	Client redis.UniversalClient
	// Functions says the suite runs its scripts as Redis 7 Functions
	// (script.WithFunctions: FUNCTION LOAD, then FCALL), the way cyclesd
	// runs on Redis 7; false, through EVALSHA, the way it runs on the
	// embedded store and Redis 6. test/scripttest builds an executor in the
	// backend's mode.
	Functions bool
}

// Backends returns the legs every domain suite runs: the shared real
// backend (a redis-server, or the Cluster with CYCLES_TEST_REDIS=cluster)
// in the production mode, FCALL when every master runs Redis 7 or later,
// and a fresh embedded store (EVALSHA, as dev mode runs). The EVALSHA path on
// real Redis (Redis 6 deployments) is covered where it differs from FCALL,
// by the script package's own suites over AllModes; doubling every domain
// suite for it would add minutes to make test for no new path.
func Backends(tb testing.TB) []Backend {
	tb.Helper()
	return []Backend{SharedBackend(tb), BackendOn(tb, Embedded(tb))}
}

// SharedBackend is the real leg of Backends alone: the shared backend
// (SharedClient) in the production mode, for suites that need a server
// but no second leg.
func SharedBackend(tb testing.TB) Backend {
	tb.Helper()
	return BackendOn(tb, SharedClient(tb))
}

// BackendOn is c in the mode cyclesd would run its scripts in on c's
// server (internal/app): EVALSHA on an embedded store started here (Embedded,
// Clocked), as dev mode runs; on a redis-server or Cluster, FCALL when every
// master runs Redis 7 or later, EVALSHA before. Named "embedded" or "redis".
func BackendOn(tb testing.TB, c redis.UniversalClient) Backend {
	tb.Helper()
	if single, ok := c.(*redis.Client); ok {
		if _, ok := embeddedAddrs.Load(single.Options().Addr); ok {
			return Backend{Name: "embedded", Client: c}
		}
	}
	return Backend{Name: "redis", Client: c, Functions: functionsCapable(tb, c)}
}

// AllModes is Backends plus the real backend through EVALSHA: the legs of
// the suites of the script executor itself, whose two ways of sending a
// script both serve production (Redis 7 and Redis 6).
func AllModes(tb testing.TB) []Backend {
	tb.Helper()
	bs := Backends(tb)
	if !bs[0].Functions {
		return bs
	}
	return append(bs, Backend{Name: "redis-evalsha", Client: bs[0].Client})
}

// functionsCapable reports whether every master behind c runs Redis 7 or
// later, as cyclesd decides at start (internal/store/redisinfo.Redis7).
func functionsCapable(tb testing.TB, c redis.UniversalClient) bool {
	tb.Helper()
	ok, err := redisinfo.Redis7(context.Background(), c)
	if err != nil {
		// An embedded store refuses INFO server: one not started by
		// Embedded or Clocked is not known to be one.
		tb.Fatalf("redis version (an embedded store must come from redistest.Embedded or Clocked): %v", err)
	}
	return ok
}
