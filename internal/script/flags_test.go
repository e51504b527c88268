package script

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cyclesgo/cycles-go/test/redistest"
)

// The scripts that free budget or revoke a key carry "#!lua flags=allow-oom"
// (they must run when Redis is full), the reads "#!lua flags=no-writes";
// Redis 7 gets the line, the embedded store (which rejects it) gets the same
// source without it.
func TestScriptFlagLines(t *testing.T) {
	flagged := []string{"ledger/commit", "ledger/release", "admin/revoke_api_key", "sweeper/expire_batch"}
	// Reads carry no-writes: as Functions (which Redis refuses at
	// maxmemory unless flagged) they keep answering when Redis is full.
	readOnly := []string{"ledger/get", "ledger/list", "ledger/balances", "admin/verify_api_key", "admin/get_budget", "events/read"}
	for _, b := range redistest.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			var opts []Option
			if b.Name == "redis" {
				opts = append(opts, WithScriptFlags())
			}
			e, err := New(b.Client, opts...)
			if err != nil {
				t.Fatal(err)
			}
			// SCRIPT LOAD compiles every script on the server.
			if err := e.Load(context.Background()); err != nil {
				t.Fatalf("load: %v", err)
			}
			for _, name := range readOnly {
				if e.Flags(name) != "#!lua flags=no-writes" {
					t.Fatalf("%s flags = %q, want no-writes", name, e.Flags(name))
				}
			}
			for _, name := range flagged {
				if e.Flags(name) != "#!lua flags=allow-oom" {
					t.Fatalf("%s flags = %q", name, e.Flags(name))
				}
				sent := strings.HasPrefix(e.sources[name], "#!lua")
				if sent != (b.Name == "redis") {
					t.Fatalf("%s on %s: flag line sent = %v", name, b.Name, sent)
				}
			}
			for name, src := range e.sources {
				if strings.Contains(src[1:], "#!lua") {
					t.Fatalf("%s: a flag line inside the source", name)
				}
			}
		})
	}
}

func TestStoreFullIsClassified(t *testing.T) {
	err := classify("ledger/reserve", errors.New("OOM command not allowed when used memory > 'maxmemory'. script: abc"))
	if got := err.Error(); !strings.HasPrefix(got, "STORE_FULL") {
		t.Fatalf("classified as %q, want STORE_FULL", got)
	}
}
