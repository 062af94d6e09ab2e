package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// asMainEnv makes the test binary run as paxlockctl itself (TestMain),
// for tests that need the program in a shell.
const asMainEnv = "PAXLOCKCTL_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		main()
	}
	// What the run forms start is found by runMarkerEnv: killed before
	// the binary's timeout, and none may be left once the tests ran.
	if err := os.Setenv(runMarkerEnv, strconv.Itoa(os.Getpid())); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	flag.Parse()
	if f := flag.Lookup("test.timeout"); f != nil {
		if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok {
			reapBeforeTimeout(d)
		}
	}
	code := m.Run()
	if left := killRuns(); len(left) > 0 {
		for _, l := range left {
			fmt.Fprintf(os.Stderr, "paxlockctl tests: a run form's process was left running after the tests, killed: %v\n", l)
		}
		code = max(code, 1)
	}
	os.Exit(code)
}

// TestHelp: help, help COMMAND and COMMAND -h print on standard output and
// exit 0; the usage names every command's forms, the help every variable
// that stands in for a flag; help of an unknown command is a usage error.
func TestHelp(t *testing.T) {
	code, out, errOut := runCtl(t, "", "help")
	if code != 0 || errOut != "" {
		t.Fatalf("help: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"drain NODE", "cluster list", "namespace move NAME", "namespace -meta", "elect campaign NAME VALUE",
		"completion bash|zsh", "PAXLOCK_REGISTRY", "PAXLOCK_ADMIN ", "PAXLOCK_CA", "PAXLOCK_CERT_KEY", "PAXLOCK_SECRET ", "PAXLOCK_ADMIN_TOKEN ", "-weight"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	for _, name := range commandNames {
		h, ok := helps[name]
		if !ok || len(h.forms) == 0 || h.text == "" {
			t.Errorf("command %s has no help", name)
		}
		if _, ok := commands[name]; !ok {
			t.Errorf("help names command %s, which the table lacks", name)
		}
	}
	for name := range commands {
		if _, ok := helps[name]; !ok {
			t.Errorf("command %s has no help", name)
		}
	}
	code, out, _ = runCtl(t, "", "help", "lock")
	if code != 0 || !strings.Contains(out, "lock KEY -- CMD") || !strings.Contains(out, "-weight") || !strings.Contains(out, "(env PAXLOCK_REGISTRY)") || strings.Contains(out, "-balanced") {
		t.Errorf("help lock: exit %d\n%s", code, out)
	}
	if code, out, _ := runCtl(t, "", "state", "-h"); code != 0 || !strings.Contains(out, "/locks/{ns}/{key}") || !strings.Contains(out, "-admin-token-file") {
		t.Errorf("state -h: exit %d, want the admin read and its flags\n%s", code, out)
	}
	for _, args := range [][]string{{"lock", "-h"}, {"-registry", "x", "drain", "-h"}, {"namespace", "list", "--help"}} {
		code, out, _ := runCtl(t, "", args...)
		cmd := args[0]
		if cmd == "-registry" {
			cmd = args[2]
		}
		if code != 0 || !strings.HasPrefix(out, "usage:\n  paxlockctl "+cmd) {
			t.Errorf("%q: exit %d\n%s", args, code, out)
		}
	}
	if code, out, _ := runCtl(t, "", "-h"); code != 0 || !strings.Contains(out, "commands:") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCtl(t, "", "help", "frobnicate"); code != 2 || !strings.Contains(errOut, "frobnicate") {
		t.Errorf("help frobnicate: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runCtl(t, "", "drain"); code != 2 || !strings.Contains(errOut, "paxlockctl help drain") {
		t.Errorf("drain without NODE: exit %d, %q; want the command's usage", code, errOut)
	}
}

// TestApplyEnv: a variable gives its flag's value when the command line
// does not; the command line wins; an empty variable counts only for the
// flags where an empty value means something.
func TestApplyEnv(t *testing.T) {
	env := map[string]string{
		"PAXLOCK_REGISTRY": "10.0.0.1:7101", "PAXLOCK_NAMESPACE": "orders", "PAXLOCK_CERT_KEY": "k.pem",
		"PAXLOCK_ADMIN": "", "PAXLOCK_ADMIN_CA": "", "PAXLOCK_KEY": "a-lock-key",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o := &options{}
	fs := newFlagSet(o)
	fs.SetOutput(io.Discard)
	if _, _, err := parseInterspersed(fs, []string{"-namespace", "ops", "state", "k"}); err != nil {
		t.Fatal(err)
	}
	set, err := applyEnv(fs, lookup)
	if err != nil {
		t.Fatal(err)
	}
	o.fs = fs
	o.noteGiven()
	if o.registry != "10.0.0.1:7101" || o.ns != "ops" || o.clientKey != "k.pem" || o.admin == "" || !o.explicitAdmin {
		t.Errorf("registry %q namespace %q key %q admin %q explicit %v", o.registry, o.ns, o.clientKey, o.admin, o.explicitAdmin)
	}
	if strings.Join(set, " ") != "registry key admin-ca" {
		t.Errorf("set from the environment: %q", set)
	}
}

// TestEnvRun: with PAXLOCK_REGISTRY and PAXLOCK_NAMESPACE exported (and
// the secret in PAXLOCK_SECRET), lock KEY -- CMD works with no flags; a
// flag wins over its variable. -value is the holder value others see
// while CMD runs; a -weight or -value out of bounds is a usage error.
func TestEnvRun(t *testing.T) {
	n := startNode(t)
	t.Setenv("PAXLOCK_REGISTRY", n.registry)
	t.Setenv("PAXLOCK_NAMESPACE", "ops")
	code, out, errOut := runCtl(t, "", "lock", "envk", "--", "sh", "-c", `echo "$PAXLOCK_NAMESPACE $PAXLOCK_KEY"`)
	if code != 0 || out != "ops envk\n" {
		t.Fatalf("lock with the environment only: exit %d, %q, %s", code, out, errOut)
	}
	t.Setenv("PAXLOCK_NAMESPACE", "no-such-namespace")
	if code, _, errOut := runCtl(t, "", "-namespace", "ops", "lock", "envk", "--", "true"); code != 0 {
		t.Fatalf("-namespace over PAXLOCK_NAMESPACE: exit %d, %s", code, errOut)
	}
	if code, _, _ := runCtl(t, "", "-timeout", "2s", "state", "envk"); code != 1 {
		t.Errorf("state in an unknown namespace from the environment: exit %d, want 1", code)
	}
	t.Setenv("PAXLOCK_NAMESPACE", "ops")

	dir := t.TempDir()
	ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
	script := "touch " + ready + "; while [ ! -e " + goOn + " ]; do sleep 0.02; done"
	done, _, errBuf := background(context.Background(), nil, "lock", "valued", "-value", "job-42", "-weight", "10", "--", "sh", "-c", script)
	waitFile(t, ready)
	st, err := n.client(t).State(context.Background(), "valued")
	if err != nil || !st.Held || st.Value != "job-42" {
		t.Errorf("state while CMD runs: %+v, %v; want held with value job-42", st, err)
	}
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, done); code != 0 {
		t.Fatalf("lock -value -weight: exit %d, %s", code, errBuf.String())
	}
	for _, args := range [][]string{
		{"lock", "k", "-weight", "11", "--", "true"}, {"sem", "acquire", "s", "1", "-limit", "1", "-weight", "-1", "--", "true"},
		{"lock", "k", "-value", strings.Repeat("v", 2000), "--", "true"}, {"lock", "k", "1s", "-weight", "99"},
	} {
		if code, _, _ := runCtl(t, "", args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args[:min(len(args), 4)], code)
		}
	}
}

// waitFile waits until file exists, for up to 30 seconds.
func waitFile(t *testing.T, file string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(file); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear", file)
}

// TestCompletionBash: the bash script loads (complete -p names its
// function) and completes commands, subcommands, flags and, after "--",
// the system's commands.
func TestCompletionBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := "#!/bin/sh\n" + asMainEnv + "=1 exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "paxlockctl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `source <(paxlockctl completion bash) && complete -p paxlockctl || exit 1
c() { COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _paxlockctl; echo "${COMPREPLY[*]}"; }
c paxlockctl dra
c paxlockctl -registry 127.0.0.1:7101 elect ""
c paxlockctl lock k -wei
c paxlockctl -namespace nam
c paxlockctl lock k -- tru`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := []string{"complete -o default -F _paxlockctl paxlockctl", "drain", "campaign observe", "-weight", "", "true"}
	if len(lines) != len(want) {
		t.Fatalf("bash printed %q, want %q", lines, want)
	}
	for i := range want {
		if !strings.Contains(lines[i], want[i]) || want[i] == "" && lines[i] != "" {
			t.Errorf("line %d: %q, want %q", i, lines[i], want[i])
		}
	}
}

// TestCompletionZsh: the zsh script names every command and flag and
// registers its function.
func TestCompletionZsh(t *testing.T) {
	code, out, _ := runCtl(t, "", "completion", "zsh")
	if code != 0 || !strings.HasPrefix(out, "#compdef paxlockctl") || !strings.Contains(out, "compdef _paxlockctl paxlockctl") {
		t.Fatalf("completion zsh: exit %d\n%s", code, out)
	}
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(out, func(r rune) bool { return r == ' ' || r == '(' || r == ')' || r == '\n' }) {
		words[w] = true
	}
	fs := newFlagSet(&options{})
	fs.VisitAll(func(f *flag.Flag) {
		if !words["-"+f.Name] {
			t.Errorf("zsh script lacks -%s", f.Name)
		}
	})
	for _, c := range commandNames {
		if !words[c] {
			t.Errorf("zsh script lacks command %s", c)
		}
	}
	if code, _, _ := runCtl(t, "", "completion", "fish"); code != 2 {
		t.Errorf("completion fish: exit %d, want 2", code)
	}
}
