package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxlocktest"
)

// ctlOnPath puts a paxlockctl on $PATH for the test (the test binary run
// as main), so that a run form's CMD can run paxlockctl.
func ctlOnPath(t *testing.T) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	wrapper := "#!/bin/sh\n" + asMainEnv + "=1 exec '" + exe + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "paxlockctl"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// outHas waits until b holds want.
func outHas(t *testing.T, b *testutil.Buffer, want string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(b.String(), want) }, "output %q to hold %q", b.String(), want)
}

// TestLockNonReentrant: lock -nonreentrant inside a run form that holds
// the same key fails at once (exit 1, "not reentrant"), in both of its
// forms, where a plain lock waits for its own holder (here until -wait);
// a key the enclosing run forms do not hold is taken; PAXLOCK_HELD lists
// the enclosing holds, outermost first; -nonreentrant is lock's only.
func TestLockNonReentrant(t *testing.T) {
	n := startNode(t)
	ctlOnPath(t)
	t.Setenv("PAXLOCK_REGISTRY", n.registry)
	script := `paxlockctl lock -nonreentrant nr -- true; echo "inner=$?"
paxlockctl lock -nonreentrant nr 1s; echo "hold=$?"
paxlockctl lock -wait 300ms nr -- true; echo "plain=$?"
paxlockctl lock -nonreentrant -wait 10s "nr other" -- sh -c 'echo "held=$PAXLOCK_HELD"'; echo "other=$?"`
	code, out, errOut := runCtl(t, "", append(n.flags, "lock", "-nonreentrant", "nr", "--", "sh", "-c", script)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"inner=1\n", "hold=1\n", "plain=124\n", "held=ops/nr ops/nr+other\n", "other=0\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("CMD printed %q, want %q in it", out, want)
		}
	}
	if strings.Count(errOut, "not reentrant") != 2 {
		t.Errorf("stderr %q: want the two refusals to say \"not reentrant\"", errOut)
	}
	if code, _, e := runCtl(t, "", append(n.flags, "rlock", "-nonreentrant", "nr", "--", "true")...); code != 2 {
		t.Errorf("rlock -nonreentrant: exit %d, want 2 (usage): %s", code, e)
	}
}

// TestUpgradableRLock: rlock -upgradable holds the upgradable read: a
// second upgradable reader and an upgradable writer wait, a plain reader
// shares it; its CMD upgrades (a higher token), downgrades (the same
// token) and upgrades again through paxlockctl upgrade and downgrade,
// after the -wait that bounded the read's acquire has passed;
// upgrade outside one is a usage error; and when the gate is
// force-unlocked, CMD is stopped and paxlockctl exits 125.
func TestUpgradableRLock(t *testing.T) {
	n := startNode(t)
	ctlOnPath(t)
	t.Setenv("PAXLOCK_REGISTRY", n.registry)
	if code, _, e := runCtl(t, "", "upgrade"); code != 2 || !strings.Contains(e, envUpgrade) {
		t.Fatalf("upgrade outside rlock -upgradable: exit %d, %q; want 2", code, e)
	}
	if code, _, e := runCtl(t, "", append(n.flags, "rlock", "-upgradable", "-wait", "0", "u", "--", "true")...); code != 2 {
		t.Fatalf("rlock -upgradable -wait 0: exit %d, want 2: %s", code, e)
	}
	gate := filepath.Join(t.TempDir(), "go")
	script := `echo "read=$PAXLOCK_TOKEN"
while [ ! -f ` + gate + ` ]; do sleep 0.05; done
w=$(paxlockctl upgrade -wait 20s) || exit 9; echo "write=$w"
d=$(paxlockctl downgrade) || exit 10; echo "down=$d"
w2=$(paxlockctl upgrade) || exit 11; echo "again=$w2"`
	done, out, errOut := background(context.Background(), nil, append(n.flags, "rlock", "-upgradable", "-wait", "20s", "u", "--", "sh", "-c", script)...)
	outHas(t, out, "read=")
	for _, args := range [][]string{{"rlock", "-upgradable"}, {"wlock", "-upgradable"}} {
		if code, _, e := runCtl(t, "", append(append(n.flags, args...), "-wait", "300ms", "u", "--", "true")...); code != exitNotAcquired {
			t.Errorf("%v beside the upgradable reader: exit %d, want %d: %s", args, code, exitNotAcquired, e)
		}
	}
	if code, _, e := runCtl(t, "", append(n.flags, "rlock", "-wait", "20s", "u", "--", "true")...); code != 0 {
		t.Errorf("a plain reader beside the upgradable reader: exit %d: %s", code, e)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, done); code != 0 {
		t.Fatalf("rlock -upgradable: exit %d: %q %s", code, out.String(), errOut.String())
	}
	tok := map[string]uint64{}
	for _, m := range regexp.MustCompile(`(read|write|down|again)=([0-9]+)`).FindAllStringSubmatch(out.String(), -1) {
		tok[m[1]], _ = strconv.ParseUint(m[2], 10, 64)
	}
	if len(tok) != 4 || tok["write"] <= tok["read"] || tok["down"] != tok["write"] || tok["again"] <= tok["down"] {
		t.Fatalf("tokens %v: want write above read, down equal to write, again above down (%q)", tok, out.String())
	}

	// The gate force-unlocked: the upgradable read is lost.
	done, _, errOut = background(context.Background(), nil, append(n.flags, "-o", "json", "rlock", "-upgradable", "u", "--", "sleep", "30")...)
	outHas(t, errOut, `"locked"`)
	if code, _, e := runCtl(t, "", append(n.admin, "unlock", "--force", "u/upgrade")...); code != 0 {
		t.Fatalf("unlock --force u/upgrade: exit %d: %s", code, e)
	}
	if code := exitOf(t, done); code != exitLost || !strings.Contains(eventNames(events(t, errOut.String())), "lost") {
		t.Fatalf("rlock -upgradable whose gate was revoked: exit %d, want %d: %s", code, exitLost, errOut.String())
	}
}

// TestRecipeLocksMasterChange: the run forms of the non-reentrant lock
// and the upgradable read hold across a master change of their key's
// group: lock -nonreentrant's CMD still refuses the key after it and
// exits 0 with its hold intact, and an upgrade asked after the key's
// master was stopped is granted by the new master.
func TestRecipeLocksMasterChange(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no sh to run commands with")
	}
	cl := paxlocktest.NewCluster(t, 3)
	ctlOnPath(t)
	reapRuns(t)
	t.Setenv("PAXLOCK_REGISTRY", strings.Join(cl.Registry(), ","))
	t.Setenv("PAXLOCK_NAMESPACE", paxlocktest.DefaultNamespace)
	t.Setenv(SecretEnv, paxlocktest.DefaultSecret)
	dir := t.TempDir()
	gate := func(name string) string { return filepath.Join(dir, name) }
	// Both keys in groups that one node masters, so stopping it changes
	// both masters.
	master := cl.MasterOf("mc:up")
	nrKey := ""
	for i := range 200 {
		if k := "mc:nr" + strconv.Itoa(i); cl.MasterOf(k) == master {
			nrKey = k
			break
		}
	}
	if master == 0 || nrKey == "" {
		t.Fatalf("no master known for mc:up (%d), or no key found that it masters too", master)
	}
	nr := `echo locked; while [ ! -f ` + gate("nr") + ` ]; do sleep 0.05; done
paxlockctl lock -nonreentrant ` + nrKey + ` -- true; echo "inner=$?"`
	up := `echo "read=$PAXLOCK_TOKEN"; while [ ! -f ` + gate("up") + ` ]; do sleep 0.05; done
w=$(paxlockctl upgrade) || exit 9; echo "write=$w"`
	nrDone, nrOut, nrErr := background(context.Background(), nil, "lock", "-nonreentrant", "-ttl", "10s", nrKey, "--", "sh", "-c", nr)
	upDone, upOut, upErr := background(context.Background(), nil, "rlock", "-upgradable", "-ttl", "10s", "mc:up", "--", "sh", "-c", up)
	outHas(t, nrOut, "locked")
	outHas(t, upOut, "read=")
	if err := cl.StopNode(master); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"nr", "up"} {
		if err := os.WriteFile(gate(g), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code := exitOf(t, nrDone); code != 0 || !strings.Contains(nrOut.String(), "inner=1") {
		t.Fatalf("lock -nonreentrant across a master change: exit %d, %q %s", code, nrOut.String(), nrErr.String())
	}
	if code := exitOf(t, upDone); code != 0 || !strings.Contains(upOut.String(), "write=") {
		t.Fatalf("rlock -upgradable, upgrade across a master change: exit %d, %q %s", code, upOut.String(), upErr.String())
	}
}
