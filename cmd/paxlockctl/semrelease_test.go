package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSemRelease: inside sem acquire's CMD, sem release COUNT gives back
// COUNT of the permits and prints how many the hold keeps: a contender
// that did not fit beside the three permits fits beside the one kept;
// giving back every permit left, or a COUNT that is not a number, is a
// usage error (exit 2) that changes nothing; sem release outside sem
// acquire is one too; the run form's end gives the rest back.
func TestSemRelease(t *testing.T) {
	n := startNode(t)
	ctlOnPath(t)
	t.Setenv("PAXLOCK_REGISTRY", n.registry)
	if code, _, e := runCtl(t, "", "sem", "release", "1"); code != 2 || !strings.Contains(e, envSem) {
		t.Fatalf("sem release outside sem acquire: exit %d, %q; want 2 naming %s", code, e, envSem)
	}
	gate, done2 := filepath.Join(t.TempDir(), "go"), filepath.Join(t.TempDir(), "end")
	script := `echo "start=$PAXLOCK_PERMITS"
while [ ! -f ` + gate + ` ]; do sleep 0.05; done
k=$(paxlockctl sem release 2) || exit 9; echo "kept=$k"
paxlockctl sem release 1; echo "all=$?"
paxlockctl sem release x; echo "nan=$?"
while [ ! -f ` + done2 + ` ]; do sleep 0.05; done`
	done, out, errOut := background(context.Background(), nil, append(n.flags, "sem", "acquire", "pool", "3", "-limit", "3", "--", "sh", "-c", script)...)
	outHas(t, out, "start=3")
	if code, _, e := runCtl(t, "", append(n.flags, "sem", "acquire", "pool", "2", "-limit", "3", "-wait", "300ms", "--", "true")...); code != exitNotAcquired {
		t.Fatalf("2 permits beside 3 of 3: exit %d, want %d: %s", code, exitNotAcquired, e)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	outHas(t, out, "nan=")
	for _, want := range []string{"kept=1\n", "all=2\n", "nan=2\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("CMD printed %q, want %q in it", out.String(), want)
		}
	}
	if code, _, e := runCtl(t, "", append(n.flags, "sem", "acquire", "pool", "2", "-limit", "3", "-wait", "20s", "--", "true")...); code != 0 {
		t.Errorf("2 permits beside the 1 kept: exit %d, want 0: %s", code, e)
	}
	if code, _, e := runCtl(t, "", append(n.flags, "sem", "acquire", "pool", "3", "-limit", "3", "-wait", "300ms", "--", "true")...); code != exitNotAcquired {
		t.Errorf("3 permits beside the 1 kept: exit %d, want %d: %s", code, exitNotAcquired, e)
	}
	if err := os.WriteFile(done2, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, done); code != 0 {
		t.Fatalf("sem acquire: exit %d: %q %s", code, out.String(), errOut.String())
	}
	if code, _, e := runCtl(t, "", append(n.flags, "sem", "acquire", "pool", "3", "-limit", "3", "-wait", "20s", "--", "true")...); code != 0 {
		t.Errorf("3 permits after the run form ended: exit %d, want 0: %s", code, e)
	}
}
