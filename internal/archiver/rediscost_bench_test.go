package archiver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/cyclesgo/cycles-go/internal/archive"
	"github.com/cyclesgo/cycles-go/internal/ledger"
	"github.com/cyclesgo/cycles-go/internal/script"
	"github.com/cyclesgo/cycles-go/test/pgtest"
	"github.com/cyclesgo/cycles-go/test/redistest"
)

// BenchmarkArchiveRedisCost profiles what the archive costs Redis per
// settled reservation: b.N x 1,000 reserve+commit through the ledger (16
// workers, Functions, pipelined as cyclesd runs them) with the archive off,
// the same with it on, one archiver round draining them (a backlog, as
// after an outage), then settles with the archiver running its rounds
// meanwhile (steady traffic, as make bench-archive-lag). For each
// phase it reports Redis's own CPU (INFO cpu: used_cpu_user + used_cpu_sys
// deltas, the whole process, syscalls included) and the microseconds INFO
// commandstats gives each command, per settle; -v logs the per-command
// breakdown. Figures: BENCHMARKS.md, "Redis cost per archived settle".
func BenchmarkArchiveRedisCost(b *testing.B) {
	ctx := context.Background()
	// Generous timeouts: the bench may run redis-server under callgrind.
	c := redis.NewClient(&redis.Options{Addr: redistest.Start(b).Addr, PoolSize: 64,
		ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	ex, err := script.New(c, script.WithFunctions(), script.WithCallTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	if err := ex.Load(ctx); err != nil {
		b.Fatal(err)
	}
	st, err := archive.Open(ctx, pgtest.SharedDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	const tn = benchTenant
	seedBenchTenant(b, c, 1<<50)
	n := b.N * 1000
	b.ResetTimer()
	for _, ph := range []struct {
		name    string
		archive bool
	}{{"settle-archive-off", false}, {"settle-archive-on", true}} {
		led := ledger.New(ex, ledger.Options{Archive: ph.archive})
		costPhase(ctx, b, c, ph.name, n, func() {
			settleMany(ctx, b, led, tn, ph.name, n)
		})
	}
	a, err := New(ex, st, ArchiverOptions{HotRetention: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	costPhase(ctx, b, c, "archive-round", n, func() {
		got, err := a.Once(ctx)
		if err != nil || got != int64(n) {
			b.Fatalf("archived %d of %d: %v", got, n, err)
		}
	})
	// As under steady traffic (make bench-archive-lag): the archiver runs
	// its rounds while the settles come, until the queue is empty.
	led := ledger.New(ex, ledger.Options{Archive: true})
	costPhase(ctx, b, c, "settle+archive-running", n, func() {
		rctx, cancel := context.WithCancel(ctx)
		ran := make(chan error, 1)
		go func() { ran <- a.Run(rctx) }()
		before := a.Stats().Archived
		settleMany(ctx, b, led, tn, "running", n)
		for a.Stats().Archived-before < int64(n) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-ran; err != nil {
			b.Fatal(err)
		}
	})
}

// settleMany reserves and commits n reservations over 16 workers.
func settleMany(ctx context.Context, b *testing.B, led *ledger.Ledger, tn, tag string, n int) {
	const workers = 16
	var g errgroup.Group
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for i := w; i < n; i += workers {
				res, err := led.Reserve(ctx, tn, benchReserve(fmt.Sprintf("%s-r-%d", tag, i)))
				if err == nil {
					_, err = led.Commit(ctx, tn, benchCommit(res.GetReservationId(), fmt.Sprintf("%s-c-%d", tag, i)))
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
}

// costPhase runs f between two reads of Redis's CPU and command stats and
// reports both per settle (n settles).
func costPhase(ctx context.Context, b *testing.B, c *redis.Client, name string, n int, f func()) {
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cg := callgrindDir()
	pid := infoFields(ctx, b, c, "server")["process_id"]
	if cg != "" {
		if out, err := exec.Command("callgrind_control", "--zero", pid).CombinedOutput(); err != nil {
			b.Fatalf("callgrind_control --zero: %v %s", err, out)
		}
	}
	cpu0 := redisCPU(ctx, b, c)
	f()
	cpu := redisCPU(ctx, b, c) - cpu0
	stats := commandStats(ctx, b, c)
	b.ReportMetric(cpu*1e6/float64(n), name+"-cpu-µs/settle")
	if cg != "" {
		ir, err := callgrindDump(cg, pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(ir)/float64(n), name+"-instr/settle")
	}
	var lines []string
	for cmd, s := range stats {
		lines = append(lines, fmt.Sprintf("%-22s calls/settle %7.3f  µs/settle %8.2f", cmd, float64(s.calls)/float64(n), s.usec/float64(n)))
	}
	sort.Strings(lines)
	b.Logf("%s: Redis CPU %.1f µs/settle\n  %s", name, cpu*1e6/float64(n), strings.Join(lines, "\n  "))
}

// callgrindDir is where redis-server writes its callgrind dumps when the
// bench runs it under callgrind (REDIS_SERVER a wrapper running
// valgrind --tool=callgrind --callgrind-out-file=$ARCHIVE_COST_CALLGRIND/cg.out
// redis-server "$@"); "" otherwise.
func callgrindDir() string { return os.Getenv("ARCHIVE_COST_CALLGRIND") }

// callgrindDump dumps pid's counters since the last zero and returns the
// instructions they count.
func callgrindDump(dir, pid string) (int64, error) {
	before, _ := filepath.Glob(filepath.Join(dir, "cg.out.*"))
	if out, err := exec.Command("callgrind_control", "--dump", pid).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("callgrind_control --dump: %w %s", err, out)
	}
	after, _ := filepath.Glob(filepath.Join(dir, "cg.out.*"))
	seen := map[string]bool{}
	for _, f := range before {
		seen[f] = true
	}
	for _, f := range after {
		if seen[f] {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			for _, p := range []string{"summary:", "totals:"} {
				if rest, ok := strings.CutPrefix(line, p); ok {
					return strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
				}
			}
		}
	}
	return 0, errors.New("callgrind: no new dump with a total")
}

// redisCPU is Redis's process CPU so far, in seconds.
func redisCPU(ctx context.Context, b *testing.B, c *redis.Client) float64 {
	info := infoFields(ctx, b, c, "cpu")
	u, _ := strconv.ParseFloat(info["used_cpu_user"], 64)
	s, _ := strconv.ParseFloat(info["used_cpu_sys"], 64)
	return u + s
}

type cmdStat struct {
	calls int64
	usec  float64
}

// commandStats is INFO commandstats: calls and µs per command (the
// commands scripts call are counted too, inside their script's µs).
func commandStats(ctx context.Context, b *testing.B, c *redis.Client) map[string]cmdStat {
	out := map[string]cmdStat{}
	for k, v := range infoFields(ctx, b, c, "commandstats") {
		cmd, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var s cmdStat
		for _, kv := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(kv, "=")
			switch name {
			case "calls":
				s.calls, _ = strconv.ParseInt(val, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseFloat(val, 64)
			}
		}
		out[cmd] = s
	}
	return out
}

func infoFields(ctx context.Context, b *testing.B, c *redis.Client, section string) map[string]string {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if ok {
			out[k] = v
		}
	}
	return out
}
