// Package pgtest starts the PostgreSQL servers the archive tests run
// against: a real postgres process (Debian's postgresql package), initdb'd
// into a private temp dir, listening on 127.0.0.1 on a free port, killed with
// the test binary and removed afterwards, the way test/redistest starts
// redis-server.
//
// initdb and postgres refuse to run as root; when the tests run as root the
// server runs as the "postgres" system user (the credentials are dropped in
// the child, so it still dies with the test binary).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// SuperUser is the role initdb creates; authentication is trust, local only.
const SuperUser = "cycles"

// Server is one postgres process.
type Server struct {
	// Dir holds the data directory, the socket and the log.
	Dir  string
	Port int
	cmd  *exec.Cmd
	cred *syscall.Credential
	bin  string
	// waited is closed once the process has exited and been reaped.
	waited chan struct{}
}

// BinDir is the directory holding initdb and postgres: PG_BIN overrides,
// else the newest /usr/lib/postgresql/*/bin, else the one on PATH.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	p, err := exec.LookPath("initdb")
	if err != nil {
		return "", errors.New("PostgreSQL not found (run `make deps` or apt-get install postgresql)")
	}
	return filepath.Dir(p), nil
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// credential is the identity postgres runs as: nil when not root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs the postgres system user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// Start runs a fresh PostgreSQL for this test and stops it at cleanup.
func Start(tb testing.TB) *Server {
	tb.Helper()
	port, err := redistest.Port()
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	s, err := StartProcess(tb.TempDir(), port)
	if err != nil {
		tb.Fatalf("start postgres: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartProcess initdb's a cluster in dir/data and runs postgres on port.
func StartProcess(dir string, port int) (*Server, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	s := &Server{Dir: dir, Port: port, cred: cred, bin: bin}
	if cred != nil {
		// The server user must reach dir (temp dirs are 0700 root) and own it.
		if err := openPath(dir); err != nil {
			return nil, err
		}
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-A", "trust", "-U", SuperUser,
		"--no-sync", "-E", "UTF8", "--locale", "C")
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := s.spawn(); err != nil {
		return nil, err
	}
	return s, nil
}

// openPath gives other users search (x) permission on dir and on each of
// its ancestors inside TMPDIR, so the postgres user can reach dir.
func openPath(dir string) error {
	root := filepath.Clean(os.TempDir())
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("chmod %s: %w", d, err)
			}
		}
		if d == root || d == filepath.Dir(d) || !isUnder(d, root) {
			return nil
		}
	}
}

func isUnder(d, root string) bool {
	rel, err := filepath.Rel(root, d)
	return err == nil && rel != ".." && !filepath.IsAbs(rel) && (len(rel) < 3 || rel[:3] != "../")
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// LogPath is the server log.
func (s *Server) LogPath() string { return filepath.Join(s.Dir, "postgres.log") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	// The server dies with the test binary even if the binary is killed
	// (Go sets the death signal after dropping the credentials).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: s.cred, Setpgid: true}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (s *Server) spawn() error {
	log, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", s.dataDir(),
		"-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1",
		// TCP only: a socket path inside a test's temp dir can pass the
		// 107-byte limit (long test names), and postgres then refuses to start.
		"-c", "unix_socket_directories=",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB",
		"-c", "logging_collector=off")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	s.waited = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { _ = c.Wait(); close(done) }(cmd, s.waited)
	return s.waitReady(30 * time.Second)
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			err = c.Ping(ctx)
			_ = c.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.waited:
			log, _ := os.ReadFile(s.LogPath())
			return fmt.Errorf("postgres on port %d exited: %w\n%s", s.Port, err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.LogPath())
			return fmt.Errorf("postgres on port %d not ready: %w\n%s", s.Port, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// DSN is the connection string of database db on this server.
func (s *Server) DSN(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", SuperUser, s.Port, db)
}

// Kill stops the server abruptly (SIGKILL), as a crash would: the
// postmaster and every backend at once. Backends are not in the
// postmaster's process group (each calls setsid), and one left to notice
// its postmaster's death could still answer a query on an open connection
// after Kill returned: a dead server that still served (the flake of
// archiver's TestMaintainerRunStops). So the postmaster is stopped first
// (it forks no more), its children are killed and waited for, then it.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	pm := s.cmd.Process.Pid
	_ = syscall.Kill(pm, syscall.SIGSTOP)
	kids := children(pm)
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range kids {
		for i := 0; i < 500 && alive(pid); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	s.signal(syscall.SIGKILL)
}

// children lists the processes whose parent is pid (from /proc).
func children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie, killed but not yet reaped,
// does not: it holds no socket and answers nothing).
func alive(pid int) bool {
	_, state, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

// procStat reads the parent and state of pid from /proc/<pid>/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+4 >= len(b) {
		return 0, 0, false
	}
	var st string
	if _, err := fmt.Sscanf(string(b[i+2:]), "%s %d", &st, &ppid); err != nil || st == "" {
		return 0, 0, false
	}
	return ppid, st[0], true
}

// Stop shuts the server down (fast shutdown: open sessions are ended).
func (s *Server) Stop() { s.signal(syscall.SIGINT) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	if sig == syscall.SIGKILL {
		// A crash takes every backend with it at once: a backend left to
		// notice its postmaster's death could still answer an open
		// connection for a moment (a "dead" server that still served).
		_ = syscall.Kill(-s.cmd.Process.Pid, sig)
	} else {
		_ = s.cmd.Process.Signal(sig)
	}
	select {
	case <-s.waited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.waited
	}
	// Backends of a killed postmaster exit on their own; wait for the group.
	for i := 0; i < 200 && syscall.Kill(-s.cmd.Process.Pid, 0) == nil; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// Restart starts the server again on the same port and data (after Kill or
// Stop), as an operator restarting PostgreSQL would.
func (s *Server) Restart() error {
	_ = os.Remove(filepath.Join(s.dataDir(), "postmaster.pid"))
	return s.spawn()
}

var (
	// shared is one server per test binary, stopped by StopShared after the
	// tests.
	shared redistest.Lazy[Server]
	dbSeq  atomic.Int64
)

// Shared returns one PostgreSQL per test binary; tests isolate themselves
// by database (NewDatabase).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	s, err := shared.Get("cycles-pgtest-", func(dir string) (*Server, error) {
		port, err := redistest.Port()
		if err != nil {
			return nil, err
		}
		return StartProcess(dir, port)
	})
	if err != nil {
		tb.Fatalf("shared postgres: %v", err)
	}
	return s
}

// NewDatabase creates an empty database on s for this test and returns its
// DSN; it is dropped at cleanup.
func NewDatabase(tb testing.TB, s *Server) string {
	tb.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		tb.Fatalf("connect postgres: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database: %v", err)
	}
	tb.Cleanup(func() {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			return // the server is gone (a test killed it): nothing to drop
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return s.DSN(name)
}

// SharedDatabase is NewDatabase on the shared server.
func SharedDatabase(tb testing.TB) string {
	tb.Helper()
	return NewDatabase(tb, Shared(tb))
}

// StopShared stops the shared server, if it was started, and removes its
// directory. Call it from TestMain (redistest.MainOptions.Setup's teardown).
func StopShared() { shared.Stop((*Server).Stop) }

// Main is the TestMain of a package whose tests use the shared server:
// redistest.Main with its leak check (no temp dir, redis-server, postgres
// or goroutine left behind), stopping the shared server at the end.
func Main(m *testing.M) {
	redistest.Main(m, redistest.MainOptions{
		LeakCheck: true,
		Setup:     func() (func(), error) { return StopShared, nil },
	})
}
