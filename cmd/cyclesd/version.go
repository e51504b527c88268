package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Stamped by `make release` (-ldflags -X main.version=... etc.); empty in
// other builds, where the Go toolchain's build info fills them in.
var (
	version string
	commit  string
	date    string
)

// buildVersion is what `cyclesd version` prints.
type buildVersion struct {
	Version, Commit, Date, Go string
	Modified                  bool
}

// readVersion combines the release stamp with the build info the Go
// toolchain embeds: the main module's version, and from a git checkout the
// commit, its time and whether the tree had local changes.
func readVersion(info *debug.BuildInfo, ok bool) buildVersion {
	v := buildVersion{Version: version, Commit: commit, Date: date, Go: runtime.Version()}
	if !ok || info == nil {
		return fill(v)
	}
	if v.Version == "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if v.Commit == "" {
				v.Commit = s.Value
			}
		case "vcs.time":
			if v.Date == "" {
				v.Date = s.Value
			}
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return fill(v)
}

func fill(v buildVersion) buildVersion {
	if v.Version == "" {
		v.Version = "(devel)"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if v.Date == "" {
		v.Date = "unknown"
	}
	return v
}

func (v buildVersion) print(w io.Writer) {
	dirty := ""
	if v.Modified {
		dirty = " (modified)"
	}
	fmt.Fprintf(w, "cyclesd %s\ncommit %s%s\nbuilt %s\n%s\n", v.Version, v.Commit, dirty, v.Date, v.Go)
}

// isVersionRequest reports whether args ask for the version: `cyclesd
// version`, or -version / --version anywhere.
func isVersionRequest(args []string) bool {
	if len(args) == 1 && args[0] == "version" {
		return true
	}
	for _, a := range args {
		if a == "-version" || a == "--version" {
			return true
		}
	}
	return false
}
