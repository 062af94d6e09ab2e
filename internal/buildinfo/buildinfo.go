// Package buildinfo describes the running binary from the build
// information the Go toolchain embeds in it: the module version, the
// version control revision, its time and whether the tree was modified,
// and the Go version.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
)

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the main module's version ("(devel)" for a build from a
	// work tree, "" if unknown).
	Version string `json:"version"`
	// Revision, Time and Modified come from the version control system
	// (vcs.revision, vcs.time, vcs.modified); empty when the binary was
	// built without it (go test, go run of a file, -buildvcs=false).
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's build information; ok is false when
// the binary carries none.
func Read() (Info, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}, false
	}
	return From(bi), true
}

// From extracts an Info from bi.
func From(bi *debug.BuildInfo) Info {
	in := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Revision = s.Value
		case "vcs.time":
			in.Time = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// String formats in on one line after the program's name, for -version:
//
//	paxlockd (devel) revision 1a2b3c4d5e6f (2026-11-23T16:00:00Z, modified) go1.26.0
func (in Info) String() string {
	var b strings.Builder
	v := in.Version
	if v == "" {
		v = "unknown"
	}
	b.WriteString(v)
	if in.Revision != "" {
		fmt.Fprintf(&b, " revision %s", in.Revision)
		var extra []string
		if in.Time != "" {
			extra = append(extra, in.Time)
		}
		if in.Modified {
			extra = append(extra, "modified")
		}
		if len(extra) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(extra, ", "))
		}
	}
	if in.GoVersion != "" {
		fmt.Fprintf(&b, " %s", in.GoVersion)
	}
	return b.String()
}

// Line is the version line program prints: its name, then Read's Info, or
// "build information unavailable".
func Line(program string) string {
	in, ok := Read()
	if !ok {
		return program + " build information unavailable"
	}
	return program + " " + in.String()
}

// current is Read's answer, read once: a binary's build information
// does not change while it runs.
var current = sync.OnceValues(Read)

// Current is Read, read once per process, for what reports the build on
// every request (a node's /status, its metrics).
func Current() (Info, bool) { return current() }
