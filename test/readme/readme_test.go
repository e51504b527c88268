// Package readme checks the repository's documentation the way a new user
// meets it: every shell block of README.md pasted in order against a freshly
// started dev-mode cyclesd, and every relative link pointing at a file inside
// the repository.
package readme

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cyclesgo/cycles-go/test/crash/cyclesdtest"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// root is the repository root, relative to this package.
const root = "../.."

// The README's fixed addresses, rewritten to free ports for the check so it
// runs beside anything already listening on them.
const (
	readmeGRPC = "localhost:7700"
	readmeHTTP = "localhost:7780"
)

// block is one fenced shell block to run.
type block struct {
	line int // 1-based line of the opening fence
	body string
}

// fence matches an opening fence and its info string.
var fence = regexp.MustCompile("^```(.*)$")

// Info strings of the fenced blocks the check runs.
const (
	// devInfo blocks run in order against a dev-mode cyclesd (make run).
	devInfo = "sh"
	// redisInfo blocks run in order against cyclesd on a real redis-server,
	// started with an admin key the blocks find in $ADMIN_KEY.
	redisInfo = "sh real-redis"
)

// shellBlocks returns the blocks whose info string is exactly info, in
// order. Other blocks (`sh no-check` for make itself or for starting a
// server, other languages) are documentation only.
func shellBlocks(md, info string) ([]block, error) {
	var blocks []block
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("line %d: unterminated code block", start+1)
		}
		if strings.TrimSpace(m[1]) == info {
			blocks = append(blocks, block{line: start + 1, body: strings.Join(body, "\n")})
		}
	}
	return blocks, nil
}

func TestShellBlocks(t *testing.T) {
	md := "text\n```sh\necho a\n```\n```sh no-check\nmake run\n```\n```go\nx\n```\n```sh\necho b\necho c\n```\n"
	got, err := shellBlocks(md, devInfo)
	if err != nil {
		t.Fatal(err)
	}
	want := []block{{2, "echo a"}, {11, "echo b\necho c"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("blocks = %v, want %v", got, want)
	}
	got, err = shellBlocks(md+"```sh real-redis\necho r\n```\n", redisInfo)
	if err != nil || fmt.Sprint(got) != fmt.Sprint([]block{{15, "echo r"}}) {
		t.Fatalf("real-redis blocks = %v, %v", got, err)
	}
	if _, err := shellBlocks("```sh\necho a\n", devInfo); err == nil {
		t.Fatal("an unterminated block was accepted")
	}
}

// findGrpcurl looks on the PATH, then where `make tools` installs it.
func findGrpcurl() (string, bool) {
	if p, err := exec.LookPath("grpcurl"); err == nil {
		return p, true
	}
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		return "", false
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "bin", "grpcurl")
	if _, err := os.Stat(p); err != nil {
		return "", false
	}
	return p, true
}

// needGrpcurl finds grpcurl or skips; make test (and CI) require it.
func needGrpcurl(t *testing.T) string {
	t.Helper()
	grpcurl, ok := findGrpcurl()
	if !ok {
		if os.Getenv("CYCLES_REQUIRE_GRPCURL") != "" || os.Getenv("CI") != "" {
			t.Fatal("grpcurl not found, and make test (or CI) requires the README check: `make tools` installs it")
		}
		t.Skip("grpcurl not found: `make tools` installs it (make test does); skipping the README check")
	}
	return grpcurl
}

// readmeBlocks reads README.md's blocks of one kind.
func readmeBlocks(t *testing.T, info string) []block {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := shellBlocks(string(md), info)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatalf("README.md has no ```%s block", info)
	}
	return blocks
}

// buildCyclesd compiles cmd/cyclesd into dir.
func buildCyclesd(t *testing.T, dir string) string {
	t.Helper()
	bin, err := cyclesdtest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestREADMESession pastes the README's dev-mode session into bash, block
// after block, against cyclesd started as `make run` starts it: any non-zero
// exit or any output on stderr fails it. Streaming steps bound themselves in
// the README (timeout), as a user's do.
func TestREADMESession(t *testing.T) {
	grpcurl := needGrpcurl(t)
	blocks := readmeBlocks(t, devInfo)
	dir := t.TempDir()
	bin := buildCyclesd(t, dir)
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	startServer(t, bin, []string{"-listen", grpcAddr, "-http-listen", httpAddr}, nil, "README walks through")
	pasteBlocks(t, dir, grpcurl, blocks, grpcAddr, httpAddr, nil)
}

// TestREADMERealRedis pastes the section that provisions the first tenant,
// key and budget against cyclesd on a real redis-server with no seed, where
// the user started it with an admin key of their own.
func TestREADMERealRedis(t *testing.T) {
	grpcurl := needGrpcurl(t)
	blocks := readmeBlocks(t, redisInfo)
	dir := t.TempDir()
	bin := buildCyclesd(t, dir)
	redis := redistest.Start(t)
	const adminKey = "readme-check-admin-key-0123456789abcdef"
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	startServer(t, bin, []string{"-listen", grpcAddr, "-http-listen="},
		[]string{"CYCLESD_REDIS_ADDRS=" + redis.Addr, "CYCLESD_ADMIN_KEY=" + adminKey}, "cyclesd listening")
	pasteBlocks(t, dir, grpcurl, blocks, grpcAddr, "", []string{"ADMIN_KEY=" + adminKey})
}

// pasteBlocks runs blocks as one bash script (so the shell functions and
// variables of one block serve the next), with the README's addresses
// rewritten to the server's, and fails on a non-zero exit or any stderr.
func pasteBlocks(t *testing.T, dir, grpcurl string, blocks []block, grpcAddr, httpAddr string, env []string) {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, b := range blocks {
		body := strings.ReplaceAll(b.body, readmeGRPC, "localhost:"+port(grpcAddr))
		if httpAddr != "" {
			body = strings.ReplaceAll(body, readmeHTTP, "localhost:"+port(httpAddr))
		}
		fmt.Fprintf(&script, "echo '>>> README block %d (line %d)'\n%s\n", i+1, b.line, body)
	}
	path := filepath.Join(dir, "readme.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", path)
	// A step that never ends (an unbounded stream) must fail the check, not
	// hang it: on timeout the whole process group goes (grpcurl included),
	// and Run stops waiting for pipes a leftover child may still hold.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	if runErr != nil || stderr.Len() > 0 {
		out := stdout.String()
		last := out
		if i := strings.LastIndex(out, ">>> README block"); i >= 0 {
			last = out[i:]
		}
		t.Fatalf("pasting README.md failed (exit: %v)\nstderr:\n%s\noutput of the failing block:\n%s", runErr, stderr.String(), tailOf(last, 4000))
	}
	t.Logf("%d README blocks ran cleanly (%d bytes of output)", len(blocks), stdout.Len())
}

func port(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// startServer runs cyclesd with args and extra environment and waits until
// its output shows ready (the dev banner, printed once the seed is in place,
// or the listening line). It is stopped with SIGTERM at cleanup.
func startServer(t *testing.T, bin string, args, env []string, ready string) {
	t.Helper()
	out := &cyclesdtest.SyncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cyclesd: %v", err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("cyclesd output:\n%s", tailOf(out.String(), 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), ready) {
		select {
		case <-exited:
			t.Fatalf("cyclesd exited before it was ready: %v", waitErr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("cyclesd not ready after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
