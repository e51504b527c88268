package abuse

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Attackers that burn CPU run in a process of their own (this test binary,
// re-run as TestAttackerProcess), at nice 10: in production the attacker's
// CPU is another machine's, and here it must not take the Go scheduler or
// the cores from the probe tenant, whose latency is what the test judges.
// Register an attacker in attackers and start it with runAttacker.

const (
	attackerEnv = "CYCLES_ABUSE_ATTACKER"
	targetEnv   = "CYCLES_ABUSE_TARGET"
)

// attackers are the out-of-process attacks by name; each runs against
// target until ctx ends.
var attackers = map[string]func(ctx context.Context, target string){
	"headers-flood": headersFlood,
	"watch-flood":   watchFlood,
	"replay":        replayer,
}

// runAttacker runs the named attacker against target in a child process
// until ctx ends (SIGTERM, then SIGKILL after 2 s).
func runAttacker(ctx context.Context, t *testing.T, name, target string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestAttackerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), attackerEnv+"="+name, targetEnv+"="+target)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out := &lockedOutput{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Errorf("start attacker %s: %v", name, err)
		return
	}
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, cmd.Process.Pid, 10)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Errorf("attacker %s ended early: %v\n%s", name, err, out)
		return
	case <-ctx.Done():
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("attacker %s: %v\n%s", name, err, out)
		}
	case <-time.After(2 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// TestAttackerProcess is the child side of runAttacker (skipped otherwise).
func TestAttackerProcess(t *testing.T) {
	name := os.Getenv(attackerEnv)
	if name == "" {
		t.Skip("only run as an attacker process")
	}
	attack, ok := attackers[name]
	if !ok {
		t.Fatalf("no attacker %q", name)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// Never outlive the parent's test by much, whatever happens.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	attack(ctx, os.Getenv(targetEnv))
}

// lockedOutput collects a child's output.
type lockedOutput struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedOutput) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedOutput) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
