package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// startTool starts the subcommands that run on processes of their own
// (archive, feed, gogc): a runner for cfg that logs progress to stderr
// (nothing when quiet), with its Redis and cyclesd started or attached
// (runner.setup). cleanup stops what it started.
func startTool(ctx context.Context, cfg *config, quiet bool) (b *runner, cleanup func(), err error) {
	b = &runner{cfg: cfg, log: os.Stderr, runID: newRunID()}
	if quiet {
		b.log = io.Discard
	}
	cleanup, err = b.setup(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b, cleanup, nil
}

// saveResult writes v as indented JSON to path (creating its directory) and
// prints it on stdout.
func saveResult(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Println(string(raw))
	return nil
}
