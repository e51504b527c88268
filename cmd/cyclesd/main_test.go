package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func noEnv(string) string { return "" }

// -help is a request, not an error: exit 0, the summary and an example first,
// every flag after, all on stdout.
func TestHelpExitsZero(t *testing.T) {
	for _, arg := range []string{"-help", "-h", "--help"} {
		t.Run(arg, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), []string{"-listen", "127.0.0.1:0", arg}, noEnv, &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d, want 0; stderr: %s", code, stderr.String())
			}
			out := stdout.String()
			if !strings.HasPrefix(out, "cyclesd: a budget authority") {
				t.Errorf("help does not open with the one-line summary:\n%s", out)
			}
			for _, want := range []string{"Usage: cyclesd [flags]", "-redis-addrs 127.0.0.1:6379 -admin-key", "-dev-seed", "CYCLESD_ADMIN_KEY", "dev-admin-key-change-me"} {
				if !strings.Contains(out, want) {
					t.Errorf("help lacks %q", want)
				}
			}
			if strings.Contains(out+stderr.String(), "flag: help requested") {
				t.Errorf("help reports itself as an error")
			}
			if stderr.Len() != 0 {
				t.Errorf("help wrote to stderr: %s", stderr.String())
			}
		})
	}
}

// A bad flag or setting is a usage error: exit 2 with the reason on stderr.
func TestBadSettingsExitTwo(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"-no-such-flag"}, "no-such-flag"},
		{"no admin key outside dev mode", []string{"-redis-addrs", "127.0.0.1:1"}, "admin key is required"},
		{"bad log format", []string{"-log-format", "xml"}, "log-format"},
		// A positional argument is refused with the usage, not ignored
		// (`cyclesd serve` once started dev mode).
		{"positional argument", []string{"serve"}, `unexpected argument "serve"`},
		{"positional after flags", []string{"-log-level", "debug", "extra"}, "Usage: cyclesd"},
		{"version with more words", []string{"version", "now"}, `unexpected argument "version"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, noEnv, &stdout, &stderr); code != 2 {
				t.Fatalf("exit code %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not name %q", stderr.String(), tc.want)
			}
		})
	}
}
