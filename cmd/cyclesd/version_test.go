package main

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"
)

// `cyclesd version` and -version print the version, commit and date and
// exit 0 without starting anything.
func TestVersionRequest(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}, {"-log-level", "debug", "-version"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), args, noEnv, &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d, want 0; stderr: %s", code, stderr.String())
			}
			out := stdout.String()
			for _, want := range []string{"cyclesd ", "\ncommit ", "\nbuilt ", "go1."} {
				if !strings.Contains(out, want) {
					t.Errorf("version output lacks %q:\n%s", want, out)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("version wrote to stderr: %s", stderr.String())
			}
		})
	}
}

// The version comes from the release stamp when there is one, else from the
// build info the Go toolchain embeds.
func TestReadVersion(t *testing.T) {
	info := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/cyclesgo/cycles-go", Version: "v0.1.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-11-25T23:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	cases := []struct {
		name                  string
		stamp                 [3]string
		info                  *debug.BuildInfo
		ok                    bool
		version, commit, date string
		modified              bool
	}{
		{"build info", [3]string{}, info, true, "v0.1.0", "abc123", "2026-11-25T23:00:00Z", true},
		{"release stamp wins", [3]string{"v1.0.0", "def456", "2026-12-01T00:00:00Z"}, info, true, "v1.0.0", "def456", "2026-12-01T00:00:00Z", true},
		{"no build info", [3]string{}, nil, false, "(devel)", "unknown", "unknown", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			version, commit, date = tc.stamp[0], tc.stamp[1], tc.stamp[2]
			t.Cleanup(func() { version, commit, date = "", "", "" })
			v := readVersion(tc.info, tc.ok)
			if v.Version != tc.version || v.Commit != tc.commit || v.Date != tc.date || v.Modified != tc.modified {
				t.Errorf("got %+v, want %s %s %s modified=%v", v, tc.version, tc.commit, tc.date, tc.modified)
			}
		})
	}
}
