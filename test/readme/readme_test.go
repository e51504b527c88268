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
	"sync"
	"syscall"
	"testing"
	"time"

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

// shellBlocks returns the blocks fenced exactly as ```sh, in order. Other
// info strings (`sh no-check` for make itself or a real Redis, other
// languages) are documentation only.
func shellBlocks(md string) ([]block, error) {
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
		if strings.TrimSpace(m[1]) == "sh" {
			blocks = append(blocks, block{line: start + 1, body: strings.Join(body, "\n")})
		}
	}
	return blocks, nil
}

func TestShellBlocks(t *testing.T) {
	md := "text\n```sh\necho a\n```\n```sh no-check\nmake run\n```\n```go\nx\n```\n```sh\necho b\necho c\n```\n"
	got, err := shellBlocks(md)
	if err != nil {
		t.Fatal(err)
	}
	want := []block{{2, "echo a"}, {11, "echo b\necho c"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("blocks = %v, want %v", got, want)
	}
	if _, err := shellBlocks("```sh\necho a\n"); err == nil {
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

// TestREADMESession pastes the README into bash, block after block, against
// a dev-mode cyclesd: any non-zero exit or any output on stderr fails it.
// Streaming steps bound themselves in the README (timeout), as a user's do.
func TestREADMESession(t *testing.T) {
	grpcurl, ok := findGrpcurl()
	if !ok {
		if os.Getenv("CYCLES_REQUIRE_GRPCURL") != "" || os.Getenv("CI") != "" {
			t.Fatal("grpcurl not found, and make test (or CI) requires the README check: `make tools` installs it")
		}
		t.Skip("grpcurl not found: `make tools` installs it (make test does); skipping the README check")
	}
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := shellBlocks(string(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```sh block")
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "cyclesd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/cyclesgo/cycles-go/cmd/cyclesd").CombinedOutput(); err != nil {
		t.Fatalf("build cyclesd: %v\n%s", err, out)
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", redistest.FreePort(t))
	startDevServer(t, bin, grpcAddr, httpAddr)

	var script strings.Builder
	script.WriteString("set -euo pipefail\n")
	for i, b := range blocks {
		body := strings.ReplaceAll(b.body, readmeGRPC, "localhost:"+port(grpcAddr))
		body = strings.ReplaceAll(body, readmeHTTP, "localhost:"+port(httpAddr))
		fmt.Fprintf(&script, "echo '>>> README block %d (line %d)'\n%s\n", i+1, b.line, body)
	}
	path := filepath.Join(dir, "readme.sh")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(grpcurl)+string(os.PathListSeparator)+os.Getenv("PATH"))
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

// startDevServer runs cyclesd as `make run` does, in dev mode (embedded
// store, demo seed), on the given addresses, and waits for its banner, which
// it prints once the seed is in place.
func startDevServer(t *testing.T, bin, grpcAddr, httpAddr string) {
	t.Helper()
	out := &logBuffer{}
	cmd := exec.Command(bin, "-listen", grpcAddr, "-http-listen", httpAddr)
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
	for !strings.Contains(out.String(), "README walks through") {
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

// logBuffer collects a process's output while the test reads it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
