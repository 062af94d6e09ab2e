package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromAndString(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/paxlock/paxlock", Version: "v0.1.0"},
		Settings: []debug.BuildSetting{
			{Key: "-compiler", Value: "gc"},
			{Key: "vcs.revision", Value: "0123456789abcdef"},
			{Key: "vcs.time", Value: "2026-11-23T16:00:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	in := From(bi)
	want := Info{Version: "v0.1.0", Revision: "0123456789abcdef", Time: "2026-11-23T16:00:00Z", Modified: true, GoVersion: "go1.26.0"}
	if in != want {
		t.Fatalf("From = %+v, want %+v", in, want)
	}
	if got, w := in.String(), "v0.1.0 revision 0123456789abcdef (2026-11-23T16:00:00Z, modified) go1.26.0"; got != w {
		t.Errorf("String = %q, want %q", got, w)
	}
	bare := From(&debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}})
	if got, w := bare.String(), "(devel) go1.26.0"; got != w {
		t.Errorf("String without vcs = %q, want %q", got, w)
	}
}

func TestLineOfTestBinary(t *testing.T) {
	l := Line("prog")
	if !strings.HasPrefix(l, "prog ") || !strings.Contains(l, runtime.Version()) {
		t.Errorf("Line = %q, want the program and %s", l, runtime.Version())
	}
}
