package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/cyclesgo/cycles-go/internal/config"
)

// Logs tell the truth in both formats: no colour codes off a terminal, no
// stack trace on a warning (it reads as a crash), durations with a unit.
func TestLoggerOutput(t *testing.T) {
	cases := []struct {
		format, duration string
	}{
		{"console", `"grace": "10s"`},
		{"json", `"grace":"10s"`},
	}
	for _, tc := range cases {
		t.Run(tc.format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := newLogger(&config.Config{LogFormat: tc.format, LogLevel: "info"}, zapcore.AddSync(&buf), false)
			if err != nil {
				t.Fatal(err)
			}
			log.Warn("DEV MODE: not durable")
			log.Info("shutting down", zap.Duration("grace", 10*time.Second))
			log.Debug("below the level")
			out := buf.String()
			if strings.Contains(out, "\x1b[") {
				t.Errorf("ANSI colour codes off a terminal:\n%q", out)
			}
			if strings.Contains(out, "stacktrace") || strings.Contains(out, "\n\t") {
				t.Errorf("a warning printed a stack trace:\n%s", out)
			}
			if !strings.Contains(out, tc.duration) {
				t.Errorf("duration without its unit; want %s in:\n%s", tc.duration, out)
			}
			if strings.Contains(out, "below the level") {
				t.Errorf("debug line logged at level info")
			}
		})
	}
}

// Colour only on a terminal: a file (what a redirect gives) is not one.
func TestConsoleColourOnlyOnTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if term.IsTerminal(int(f.Fd())) {
		t.Fatal("a regular file reported as a terminal")
	}
	var buf bytes.Buffer
	log, err := newLogger(&config.Config{LogFormat: "console", LogLevel: "info"}, zapcore.AddSync(&buf), true)
	if err != nil {
		t.Fatal(err)
	}
	log.Warn("coloured")
	if !strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("no colour on a terminal: %q", buf.String())
	}
}

// An error keeps its stack trace: that one is worth the noise.
func TestErrorKeepsStack(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&config.Config{LogFormat: "json", LogLevel: "info"}, zapcore.AddSync(&buf), false)
	if err != nil {
		t.Fatal(err)
	}
	log.Error("boom")
	if !strings.Contains(buf.String(), `"stacktrace"`) {
		t.Errorf("error without a stack trace: %s", buf.String())
	}
}
