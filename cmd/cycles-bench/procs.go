package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cyclesgo/cycles-go/internal/store/redisinfo"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// proc is a child process the tool started (redis-server or cyclesd). It
// dies with the tool (Pdeathsig) and is stopped explicitly at the end.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

func startProc(name string, bin string, args []string, env []string) (*proc, error) {
	p := &proc{name: name, out: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits up to grace, then kills.
func (p *proc) stop(grace time.Duration) {
	if p == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		err = <-p.done
	}
	p.done <- err // kept for exited(), as it keeps it
}

func (p *proc) exited() error {
	select {
	case err := <-p.done:
		p.done <- err
		if err == nil {
			err = fmt.Errorf("exited")
		}
		return fmt.Errorf("%s %w:\n%s", p.name, err, tail(p.out.String(), 4000))
	default:
		return nil
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// startRedis runs a private redis-server with the test harness's settings
// (no persistence, noeviction) in dir.
func startRedis(dir string) (*proc, string, error) {
	return startRedisUnder(dir, "", nil, 10*time.Second)
}

// startRedisUnder is startRedis with the server run by wrapper (e.g.
// valgrind) given wrapperArgs before the server's own command line; ready
// bounds the wait for its first PING (a server under valgrind starts slowly).
func startRedisUnder(dir, wrapper string, wrapperArgs []string, ready time.Duration) (*proc, string, error) {
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, "", fmt.Errorf("redis-server not found (make deps): %w", err)
		}
	}
	port, err := redistest.Port()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
		"--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log"),
	}
	if wrapper != "" {
		args = append(append(append([]string{}, wrapperArgs...), bin), args...)
		bin = wrapper
	}
	p, err := startProc("redis-server", bin, args, nil)
	if err != nil {
		return nil, "", err
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(ready)
	for {
		// A bare TCP dial first: go-redis logs every refused dial of its
		// pool, and a server under valgrind refuses for seconds.
		if conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			conn.Close()
			if err := c.Ping(context.Background()).Err(); err == nil {
				return p, addr, nil
			}
		}
		if e := p.exited(); e != nil {
			return nil, "", e
		}
		if time.Now().After(deadline) {
			p.stop(time.Second)
			return nil, "", fmt.Errorf("redis-server on %s not ready", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitServing waits until cyclesd's gRPC health says SERVING.
func waitServing(ctx context.Context, addr string, p *proc) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if p != nil {
			if err := p.exited(); err != nil {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		res, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && res.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cyclesd at %s never became SERVING: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpuTime is the user+system CPU time of a process so far (from
// /proc/<pid>/stat; 0 when unknown, e.g. not on Linux or not our process).
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name may contain spaces; fields restart after ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// After ')': state(0) ppid(1) ... utime is field 14 of the line = f[11], stime f[12].
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clkTck
}

// clkTck is USER_HZ, 100 on every Linux the tool runs on.
const clkTck = 100

// cpuSample is the CPU time of the three parties at one instant, and
// Redis's own account of its script calls (INFO commandstats).
type cpuSample struct {
	at                    time.Time
	redis, server, client time.Duration
	scriptCalls           int64
	scriptUsec            int64
	commands, reads       int64
}

// pids are the processes whose CPU time a phase reports (0: unknown), and a
// client for Redis's INFO commandstats (nil: not sampled).
type pids struct {
	redis, server int
	stats         *redis.Client
}

func (p pids) sample() cpuSample {
	s := cpuSample{at: time.Now(), redis: cpuTime(p.redis), server: cpuTime(p.server), client: cpuTime(os.Getpid())}
	if p.stats != nil {
		s.scriptCalls, s.scriptUsec = scriptStats(p.stats)
		s.commands, s.reads = ioStats(p.stats)
	}
	return s
}

// quickInfo is one INFO section of c, or "" when Redis does not answer
// within 2 s: the figures read from it are then 0.
func quickInfo(c *redis.Client, section string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, _ := c.Info(ctx, section).Result()
	return info
}

// ioStats reads total_commands_processed and total_reads_processed (INFO
// stats): commands per read shows how much pipelining Redis sees.
func ioStats(c *redis.Client) (commands, reads int64) {
	info := quickInfo(c, "stats")
	commands, _ = strconv.ParseInt(redisinfo.Field(info, "total_commands_processed"), 10, 64)
	reads, _ = strconv.ParseInt(redisinfo.Field(info, "total_reads_processed"), 10, 64)
	return commands, reads
}

// scriptStats sums calls and usec of EVALSHA, EVAL and FCALL from INFO
// commandstats: the time Redis itself spent running scripts.
func scriptStats(c *redis.Client) (calls, usec int64) {
	for _, line := range strings.Split(quickInfo(c, "commandstats"), "\n") {
		line = strings.TrimSpace(line)
		// EVALSHA/EVAL, or FCALL where cyclesd runs the scripts as Redis 7
		// Functions (internal/script/function.go).
		var rest string
		ok := false
		for _, cmd := range []string{"evalsha", "eval", "fcall", "fcall_ro"} {
			if rest, ok = strings.CutPrefix(line, "cmdstat_"+cmd+":"); ok {
				break
			}
		}
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	return calls, usec
}
