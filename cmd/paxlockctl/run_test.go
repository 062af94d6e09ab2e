package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/testutil"
)

// testNode is one in-process node serving namespace ops (secret in
// PAXLOCK_SECRET for the test), with the flags that point paxlockctl's
// client commands (flags) and admin commands (admin) at it.
type testNode struct {
	registry string
	flags    []string
	admin    []string
}

func startNode(t *testing.T) testNode {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh to run commands with")
	}
	clientAddr, adminAddr := startOpsNode(t)
	t.Setenv(SecretEnv, "ops-secret")
	reapRuns(t)
	return testNode{
		registry: clientAddr,
		flags:    []string{"-registry", clientAddr, "-namespace", "ops"},
		admin:    []string{"-admin", adminAddr, "-admin-ca", "", "-admin-token-file", "", "-namespace", "ops"},
	}
}

// client is a client of the node's namespace, closed when the test ends.
func (n testNode) client(t *testing.T) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Registry: []string{n.registry}, Namespace: "ops", Secret: "ops-secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// background runs paxlockctl with args until it exits or ctx ends; the
// exit status comes on the channel, its output in the buffers.
func background(ctx context.Context, signals <-chan os.Signal, args ...string) (<-chan int, *testutil.Buffer, *testutil.Buffer) {
	var out, errOut testutil.Buffer
	done := make(chan int, 1)
	go func() { done <- runSignals(ctx, args, strings.NewReader(""), &out, &errOut, signals) }()
	return done, &out, &errOut
}

// exitOf waits for a background paxlockctl's exit status.
func exitOf(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(30 * time.Second):
		t.Fatal("paxlockctl did not exit")
		return -1
	}
}

// events parses JSON lines into maps, failing on a line that is not one.
// Lines that do not start with "{" are CMD's (a run form's standard error
// is CMD's too) and skipped.
func events(t *testing.T, s string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		evs = append(evs, m)
	}
	return evs
}

// eventNames lists the events' "event" fields, with a signal's name.
func eventNames(evs []map[string]any) string {
	var names []string
	for _, e := range evs {
		name := fmt.Sprint(e["event"])
		if s, ok := e["signal"]; ok && name == "signal" {
			name += ":" + fmt.Sprint(s) + ":" + fmt.Sprint(e["reason"])
		}
		names = append(names, name)
	}
	return strings.Join(names, " ")
}

// fileHas waits until file holds want.
func fileHas(t *testing.T, file, want string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() bool {
		b, _ := os.ReadFile(file)
		return strings.Contains(string(b), want)
	}, "%s to hold %q", file, want)
}

// TestLockRunsCommand: lock KEY -- CMD runs CMD with the fencing token
// and key in its environment, returns CMD's exit status, 127 for a
// command not found, and with -o json reports locked, exited and
// released on standard error, leaving standard output to CMD.
func TestLockRunsCommand(t *testing.T) {
	n := startNode(t)
	t.Setenv(envToken, "stale") // a hold's variables are CMD's own
	code, out, errOut := runCtl(t, "", append(n.flags, "lock", "demo", "--", "sh", "-c", `echo "$PAXLOCK_TOKEN $PAXLOCK_KEY $PAXLOCK_NAMESPACE"`)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !regexp.MustCompile(`^[1-9][0-9]* demo ops\n$`).MatchString(out) || errOut != "" {
		t.Fatalf("CMD printed %q, paxlockctl %q; want a token, the key and the namespace, and nothing from paxlockctl", out, errOut)
	}
	token, _ := strconv.ParseUint(strings.Fields(out)[0], 10, 64)

	code, out, errOut = runCtl(t, "", append(n.flags, "-o", "json", "lock", "demo", "--", "sh", "-c", `echo $PAXLOCK_TOKEN; exit 7`)...)
	if code != 7 {
		t.Fatalf("CMD exited 7, paxlockctl %d: %s", code, errOut)
	}
	evs := events(t, errOut)
	if got := eventNames(evs); got != "locked exited released" {
		t.Fatalf("events %q, want locked exited released: %s", got, errOut)
	}
	tok2, _ := strconv.ParseUint(strings.TrimSpace(out), 10, 64)
	if evs[0]["kind"] != "lock" || evs[0]["key"] != "demo" || evs[0]["token"] != float64(tok2) || tok2 <= token ||
		evs[1]["exit_code"] != float64(7) || evs[2]["token"] != float64(tok2) {
		t.Errorf("events %v with CMD's token %d (the first run's %d)", evs, tok2, token)
	}

	if code, _, errOut := runCtl(t, "", append(n.flags, "lock", "demo", "--", "./no-such-command")...); code != exitNotFound {
		t.Errorf("a command not found: exit %d, want %d: %s", code, exitNotFound, errOut)
	}
	st := n.client(t)
	if s, err := st.State(context.Background(), "demo"); err != nil || s.Held {
		t.Errorf("demo after the runs: %+v, %v; want free", s, err)
	}
	// lock KEY [HOLD] without -- is unchanged; usage errors.
	if code, out, _ := runCtl(t, "", append(n.flags, "lock", "demo", "0s")...); code != 0 || !strings.Contains(out, "released demo") {
		t.Errorf("lock KEY HOLD: exit %d, %q", code, out)
	}
	for _, args := range [][]string{
		{"lock", "demo", "--"}, {"lock", "a", "b", "--", "true"}, {"rlock", "demo"}, {"multi", "a", "a", "--", "true"},
		{"sem", "acquire", "pool", "1", "--", "true"}, {"sem", "acquire", "pool", "5", "-limit", "3", "--", "true"},
		{"elect", "x"}, {"elect", "x", "-wait", "0", "v"},
	} {
		if code, _, _ := runCtl(t, "", append(n.flags, args...)...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestLockRunsOneAtATime: two commands under one key run one after the
// other: each one's start and end markers are never interleaved.
func TestLockRunsOneAtATime(t *testing.T) {
	n := startNode(t)
	file := filepath.Join(t.TempDir(), "log")
	script := fmt.Sprintf(`echo "start $$" >> %[1]s; sleep 0.3; echo "end $$" >> %[1]s`, file)
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range codes {
		wg.Go(func() {
			codes[i], _, _ = runCtl(t, "", append(n.flags, "lock", "job", "--", "sh", "-c", script)...)
		})
	}
	wg.Wait()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if codes[0] != 0 || codes[1] != 0 || len(lines) != 4 {
		t.Fatalf("exits %v, log %q", codes, lines)
	}
	for i := 0; i < 4; i += 2 {
		start, end := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if start[0] != "start" || end[0] != "end" || start[1] != end[1] {
			t.Fatalf("interleaved: %q", lines)
		}
	}
}

// TestLockRunWait: with -wait 0 (one try) or -wait D a held key is not
// acquired: exit status 124, CMD not run; -o json names the holder.
func TestLockRunWait(t *testing.T) {
	n := startNode(t)
	c := n.client(t)
	m := c.Mutex("busy", client.TTL(time.Minute))
	if err := m.Lock(context.Background()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ran")
	cmd := []string{"--", "sh", "-c", "touch " + file}
	code, out, errOut := runCtl(t, "", append(append(n.flags, "lock", "busy", "-wait", "0", "-o", "json"), cmd...)...)
	evs := events(t, errOut)
	if code != exitNotAcquired || out != "" || len(evs) != 1 || evs[0]["event"] != "not_acquired" ||
		evs[0]["holder"] != m.Owner().String() || evs[0]["token"] != float64(m.Token()) {
		t.Fatalf("-wait 0 on a held key: exit %d, %q, %q", code, out, errOut)
	}
	start := time.Now()
	code, _, errOut = runCtl(t, "", append(append(n.flags, "lock", "busy", "-wait", "300ms"), cmd...)...)
	if code != exitNotAcquired || !strings.Contains(errOut, "not acquired") || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("-wait 300ms on a held key: exit %d after %v, %q", code, time.Since(start), errOut)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("CMD ran without the lock")
	}
	if err := m.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCtl(t, "", append(append(n.flags, "lock", "busy", "-wait", "0"), cmd...)...); code != 0 {
		t.Fatalf("-wait 0 on a free key: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal("CMD did not run:", err)
	}
}

// TestLockRunLost: a force-unlock revokes the hold: CMD gets SIGTERM (and
// SIGKILL after -kill-after when it ignores it), paxlockctl exits 125.
func TestLockRunLost(t *testing.T) {
	n := startNode(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name, trap, want string
	}{
		{"term", `trap 'echo term >> %[1]s; exit 0' TERM`, "locked lost signal:SIGTERM:lost exited"},
		{"kill", `trap '' TERM`, "locked lost signal:SIGTERM:lost signal:SIGKILL:kill_after exited"},
	} {
		file := filepath.Join(dir, c.name)
		script := fmt.Sprintf(c.trap+`; echo started >> %[1]s; while :; do sleep 0.05; done`, file)
		done, _, errOut := background(context.Background(), nil, append(n.flags, "-o", "json", "-kill-after", "300ms", "lock", "job:"+c.name, "--", "sh", "-c", script)...)
		fileHas(t, file, "started")
		if code, out, e := runCtl(t, "", append(n.admin, "unlock", "--force", "job:"+c.name)...); code != 0 {
			t.Fatalf("unlock --force: exit %d, %q %s", code, out, e)
		}
		if code := exitOf(t, done); code != exitLost {
			t.Fatalf("%s: exit %d, want %d: %s", c.name, code, exitLost, errOut.String())
		}
		evs := events(t, errOut.String())
		if got := eventNames(evs); got != c.want {
			t.Errorf("%s: events %q, want %q", c.name, got, c.want)
		}
		if c.name == "term" {
			fileHas(t, file, "term")
		} else if last := evs[len(evs)-1]; last["signal"] != "SIGKILL" || last["exit_code"] != float64(128+9) {
			t.Errorf("CMD killed: %v", last)
		}
	}
	// In table form the loss is said on standard error.
	file := filepath.Join(dir, "table")
	done, out, errOut := background(context.Background(), nil, append(n.flags, "lock", "job:t", "--", "sh", "-c", "echo started > "+file+"; exec sleep 30")...)
	fileHas(t, file, "started")
	if code, _, e := runCtl(t, "", append(n.admin, "unlock", "--force", "job:t")...); code != 0 {
		t.Fatal(e)
	}
	if code := exitOf(t, done); code != exitLost || out.String() != "" || !strings.Contains(errOut.String(), "lost") || !strings.Contains(errOut.String(), "SIGTERM") {
		t.Errorf("table form: exit %d, %q, %q", code, out.String(), errOut.String())
	}
}

// TestLockRunSignals: SIGINT and SIGTERM to paxlockctl go on to CMD, the
// lock is released once CMD has exited, and paxlockctl exits with CMD's
// status; a context that ends without a signal sends CMD SIGTERM.
func TestLockRunSignals(t *testing.T) {
	n := startNode(t)
	dir := t.TempDir()
	script := func(file string) []string {
		return []string{"--", "sh", "-c", fmt.Sprintf(`trap 'echo int >> %[1]s; exit 4' INT; trap 'echo term >> %[1]s; exit 3' TERM; echo started >> %[1]s; while :; do sleep 0.05; done`, file)}
	}
	asMainSignals(t) // CMD's INT trap needs SIGINT not ignored
	sigs := make(chan os.Signal, 1)
	file := filepath.Join(dir, "int")
	done, _, errOut := background(context.Background(), sigs, append(append(n.flags, "-o", "json", "lock", "sig"), script(file)...)...)
	fileHas(t, file, "started")
	sigs <- syscall.SIGINT
	if code := exitOf(t, done); code != 4 {
		t.Fatalf("SIGINT: exit %d, want CMD's 4: %s", code, errOut.String())
	}
	fileHas(t, file, "int")
	if got := eventNames(events(t, errOut.String())); got != "locked signal:SIGINT:forwarded exited released" {
		t.Errorf("events %q", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	file = filepath.Join(dir, "term")
	done, _, errOut = background(ctx, nil, append(append(n.flags, "lock", "sig"), script(file)...)...)
	fileHas(t, file, "started")
	cancel()
	if code := exitOf(t, done); code != 3 {
		t.Fatalf("context ended: exit %d, want CMD's 3: %s", code, errOut.String())
	}
	fileHas(t, file, "term")
	if s, err := n.client(t).State(context.Background(), "sig"); err != nil || s.Held {
		t.Errorf("sig after the runs: %+v, %v; want free", s, err)
	}
}

// TestRWLockSemMultiRun: rlock and wlock take a read-write lock's sides
// (two readers at once, no writer meanwhile), sem acquire takes permits
// of a semaphore, multi takes several keys; each gives CMD its tokens.
func TestRWLockSemMultiRun(t *testing.T) {
	n := startNode(t)
	file := filepath.Join(t.TempDir(), "reader")
	done, _, errOut := background(context.Background(), nil, append(n.flags, "rlock", "cat", "--", "sh", "-c", "echo started > "+file+"; sleep 1")...)
	fileHas(t, file, "started")
	code, out, e := runCtl(t, "", append(n.flags, "rlock", "cat", "-wait", "0", "--", "sh", "-c", `echo "$PAXLOCK_KEY $PAXLOCK_TOKEN"`)...)
	if code != 0 || !regexp.MustCompile(`^cat [1-9][0-9]*\n$`).MatchString(out) {
		t.Fatalf("a second reader: exit %d, %q, %s", code, out, e)
	}
	if code, _, e := runCtl(t, "", append(n.flags, "wlock", "cat", "-wait", "0", "--", "true")...); code != exitNotAcquired {
		t.Fatalf("a writer while read-locked: exit %d, %s", code, e)
	}
	if code := exitOf(t, done); code != 0 {
		t.Fatalf("the first reader: exit %d, %s", code, errOut.String())
	}
	code, out, e = runCtl(t, "", append(n.flags, "-o", "json", "wlock", "cat", "--", "sh", "-c", `echo $PAXLOCK_TOKEN`)...)
	if evs := events(t, e); code != 0 || len(evs) == 0 || evs[0]["kind"] != "wlock" || fmt.Sprint(evs[0]["token"]) != strings.TrimSpace(out) {
		t.Fatalf("wlock: exit %d, %q, %s", code, out, e)
	}

	code, out, e = runCtl(t, "", append(n.flags, "-o", "json", "sem", "acquire", "gpu", "2", "-limit", "3", "--", "sh", "-c", `echo "$PAXLOCK_KEY $PAXLOCK_PERMITS $PAXLOCK_TOKEN"`)...)
	evs := events(t, e)
	if code != 0 || !regexp.MustCompile(`^gpu 2 [1-9][0-9]*\n$`).MatchString(out) || len(evs) == 0 ||
		evs[0]["kind"] != "sem" || evs[0]["permits"] != float64(2) || evs[0]["limit"] != float64(3) {
		t.Fatalf("sem acquire: exit %d, %q, %s", code, out, e)
	}
	s := n.client(t).Semaphore("gpu", 3, client.TTL(time.Minute))
	if err := s.Acquire(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	if code, _, e := runCtl(t, "", append(n.flags, "sem", "acquire", "gpu", "2", "-limit", "3", "-wait", "0", "--", "true")...); code != exitNotAcquired {
		t.Fatalf("sem acquire of more permits than are free: exit %d, %s", code, e)
	}
	if code, _, e := runCtl(t, "", append(n.flags, "sem", "acquire", "gpu", "1", "-limit", "3", "-wait", "0", "--", "true")...); code != 0 {
		t.Fatalf("sem acquire of the free permit: exit %d, %s", code, e)
	}

	code, out, e = runCtl(t, "", append(n.flags, "-o", "json", "multi", "acct:2", "acct:1", "--", "sh", "-c", `echo "$PAXLOCK_KEYS"; echo "$PAXLOCK_TOKENS"`)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	evs = events(t, e)
	if code != 0 || len(lines) != 2 || lines[0] != "acct:2 acct:1" || len(strings.Fields(lines[1])) != 2 || len(evs) == 0 ||
		fmt.Sprint(evs[0]["keys"]) != "[acct:2 acct:1]" || evs[0]["kind"] != "multi" {
		t.Fatalf("multi: exit %d, %q, %s", code, out, e)
	}
	for i, tok := range strings.Fields(lines[1]) {
		if fmt.Sprint(evs[0]["tokens"].([]any)[i]) != tok {
			t.Errorf("multi: CMD's tokens %q, events %v", lines[1], evs[0])
		}
	}
	if code, _, e := runCtl(t, "", append(n.flags, "-o", "json", "multi", "acct:1", "acct:3", "-wait", "0", "--", "true")...); code != 0 {
		t.Fatalf("multi: exit %d, %s", code, e)
	}
}

// TestElect: elect NAME VALUE prints the win with its token, leads until
// interrupted and resigns (exit 0); a lost leadership exits 125; -wait
// gives up campaigning (124); elect observe prints each leader.
func TestElect(t *testing.T) {
	n := startNode(t)
	obsCtx, stopObs := context.WithCancel(context.Background())
	defer stopObs()
	obsDone, obsOut, _ := background(obsCtx, nil, append(n.flags, "-o", "json", "elect", "observe", "sched")...)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done, out, errOut := background(ctx, nil, append(n.flags, "-o", "json", "elect", "sched", "host-a")...)
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(out.String(), `"elected"`) }, "elected: %q %q", out.String(), errOut.String())
	won := events(t, out.String())[0]
	if won["name"] != "sched" || won["value"] != "host-a" || won["token"] == nil {
		t.Fatalf("elected: %v", won)
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(obsOut.String(), `"host-a"`) }, "observe: %q", obsOut.String())
	if code, _, e := runCtl(t, "", append(n.flags, "elect", "sched", "host-c", "-wait", "200ms")...); code != exitNotAcquired {
		t.Fatalf("a campaign with -wait while another leads: exit %d, %s", code, e)
	}
	stop()
	if code := exitOf(t, done); code != 0 {
		t.Fatalf("elect interrupted: exit %d, %s", code, errOut.String())
	}
	if got := eventNames(events(t, out.String())); got != "elected resigned" {
		t.Errorf("elect printed %q", got)
	}

	done, out, errOut = background(context.Background(), nil, append(n.flags, "elect", "sched", "host-b")...)
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(out.String(), "elected") }, "elected: %q %q", out.String(), errOut.String())
	if !regexp.MustCompile(`^elected leader of sched with value "host-b" after .*, token [1-9][0-9]*\n$`).MatchString(out.String()) {
		t.Errorf("elect printed %q", out.String())
	}
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(obsOut.String(), `"host-b"`) }, "observe: %q", obsOut.String())
	if code, _, e := runCtl(t, "", append(n.admin, "unlock", "--force", "sched")...); code != 0 {
		t.Fatal(e)
	}
	if code := exitOf(t, done); code != exitLost || !strings.Contains(out.String(), "lost the leadership") {
		t.Fatalf("leadership revoked: exit %d, %q %s", code, out.String(), errOut.String())
	}

	stopObs()
	if code := exitOf(t, obsDone); code != 0 {
		t.Fatalf("elect observe interrupted: exit %d", code)
	}
	var last uint64
	for _, ev := range events(t, obsOut.String()) {
		tok := uint64(ev["token"].(float64))
		if ev["name"] != "sched" || ev["time"] == nil || ev["holder"] == "" || tok < last {
			t.Errorf("observe printed %v after token %d", ev, last)
		}
		last = tok
	}
}
