package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/server"
)

func TestNewLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("hello", "group", 3)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("json format wrote %q: %v", buf.String(), err)
	}
	if rec["msg"] != "hello" || rec["group"] != float64(3) {
		t.Errorf("json record %v", rec)
	}
	buf.Reset()
	log, err = newLogger(&buf, "text", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "group", 3)
	if !strings.Contains(buf.String(), "msg=hello group=3") {
		t.Errorf("text format wrote %q", buf.String())
	}
	if _, err := newLogger(&buf, "xml", slog.LevelInfo); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Errorf("format xml: err %v, want one naming it", err)
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckConfig(t *testing.T) {
	const node = `{"node_id": 1, "data_dir": "/var/lib/paxlock",
		"nodes": [{"id": 1, "peer": "127.0.0.1:7201", "client": "127.0.0.1:7101"}],
		"namespaces": [{"name": "default", "secret": "s"}]%s}`
	none := func(*server.Config) {}
	cases := []struct {
		name, role, body string
		override         func(*server.Config)
		want             string // "" accepts; else a substring of the error
		meta             string // -meta
	}{
		{"good", "node", fmt.Sprintf(node, ""), none, "", ""},
		{"unknown key", "node", fmt.Sprintf(node, `, "max_tll": "10s"`), none, `unknown field "max_tll"`, ""},
		{"nested unknown key", "node", `{"node_id": 1, "data_dir": "d", "nodes": [{"id": 1, "peer": "a:1", "client": "a:2", "gosip": "a:3"}]}`, none, `unknown field "gosip"`, ""},
		{"trailing data", "node", fmt.Sprintf(node, "") + `{}`, none, "after the JSON object", ""},
		{"bad duration", "node", fmt.Sprintf(node, `, "lease": "soon"`), none, "duration", ""},
		{"not listed", "node", fmt.Sprintf(node, ""), func(c *server.Config) { c.NodeID = 4 }, "this node (4) is not listed", ""},
		{"bad timing", "node", fmt.Sprintf(node, `, "lease": "20ms"`), none, "timing", ""},
		{"bad namespace", "node", `{"node_id": 1, "data_dir": "d", "nodes": [{"id": 1, "peer": "a:1", "client": "a:2"}], "namespaces": [{"name": "", "secret": "s"}]}`, none, "namespaces", ""},
		{"registry good", "registry", `{"listen": "127.0.0.1:0", "clusters": {"a": ["127.0.0.1:7101"]}, "namespaces": {"orders": "a"}, "secrets": {"orders": "s"}}`, none, "", ""},
		{"registry no secret", "registry", `{"listen": "127.0.0.1:0", "clusters": {"a": ["127.0.0.1:7101"]}, "namespaces": {"orders": "a"}}`, none, `namespace "orders" has no secret`, ""},
		{"registry unknown key", "registry", `{"listen": "127.0.0.1:0", "cluster": {}}`, none, `unknown field "cluster"`, ""},
		{"registry meta", "registry", `{"listen": "127.0.0.1:0", "meta": {"addrs": ["127.0.0.1:7101"], "namespace": "registry", "secret_file": "` + writeFile(t, "meta.secret", "s3cret\n") + `"}}`, none, "", ""},
		{"registry -meta", "registry", `{"listen": "127.0.0.1:0", "meta": {"namespace": "registry", "secret_file": "` + writeFile(t, "meta2.secret", "s") + `"}}`, none, "", "127.0.0.1:7101,127.0.0.1:7102"},
		{"registry meta and static", "registry", `{"listen": "127.0.0.1:0", "clusters": {"a": ["127.0.0.1:7101"]}, "meta": {"addrs": ["127.0.0.1:7101"], "namespace": "r", "secret_file": "` + writeFile(t, "meta3.secret", "s") + `"}}`, none, "exclude each other", ""},
		{"registry meta without secret", "registry", `{"listen": "127.0.0.1:0", "meta": {"addrs": ["127.0.0.1:7101"], "namespace": "r"}}`, none, "no secret", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeFile(t, "c.json", c.body)
			err := checkConfig(p, c.role, c.meta, c.override)
			if c.want == "" {
				if err != nil {
					t.Fatalf("checkConfig: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("checkConfig: %v, want an error containing %q", err, c.want)
			}
		})
	}
	if err := checkConfig(filepath.Join(t.TempDir(), "missing.json"), "node", "", none); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

// TestMain lets a test run this binary as paxlockd itself: with
// PAXLOCKD_RUN_MAIN set, the test binary runs main with its arguments.
func TestMain(m *testing.M) {
	if os.Getenv("PAXLOCKD_RUN_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runPaxlockd runs paxlockd's main in a child process with args and
// returns its exit status and combined output.
func runPaxlockd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "PAXLOCKD_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("paxlockd %q: %v", args, err)
	return 0, ""
}

// TestCheckConfigExitStatus runs paxlockd -check-config as a process:
// exit 0 and "FILE: ok" for a good file, 1 and the error naming the
// unknown key for a bad one, 1 for a missing file; -version exits 0.
func TestCheckConfigExitStatus(t *testing.T) {
	good := writeFile(t, "good.json", `{"node_id": 1, "data_dir": "/nonexistent/paxlock",
		"nodes": [{"id": 1, "peer": "127.0.0.1:7201", "client": "127.0.0.1:7101"}]}`)
	bad := writeFile(t, "bad.json", `{"node_id": 1, "data_dir": "d", "max_tll": "10s",
		"nodes": [{"id": 1, "peer": "127.0.0.1:7201", "client": "127.0.0.1:7101"}]}`)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-check-config", good}, 0, good + ": ok"},
		{[]string{"-check-config", bad}, 1, `unknown field "max_tll"`},
		{[]string{"-check-config", good, "-id", "2"}, 1, "this node (2) is not listed"},
		{[]string{"-check-config", filepath.Join(t.TempDir(), "missing.json")}, 1, "no such file"},
		{[]string{"-version"}, 0, "paxlockd "},
	}
	for _, c := range cases {
		code, out := runPaxlockd(t, c.args...)
		if code != c.code || !strings.Contains(out, c.want) {
			t.Errorf("paxlockd %q: exit %d, %q; want exit %d and %q", c.args, code, out, c.code, c.want)
		}
	}
	// -check-config opened no storage: the data directory was not made.
	if _, err := os.Stat("/nonexistent/paxlock"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("-check-config touched the data directory: %v", err)
	}
}
