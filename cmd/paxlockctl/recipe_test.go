package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/internal/testutil"
)

func TestLatchCLI(t *testing.T) {
	n := startNode(t)
	latch := func(args ...string) []string { return append(append(append([]string{}, n.flags...), "latch"), args...) }
	for _, args := range [][]string{
		{"wait", "l1"}, {"count", "l1", "-limit", "0"}, {"countdown"}, {"open", "l1", "-limit", "2"},
		{"wait", "l1", "-limit", "2", "-wait", "0s"},
	} {
		if code, _, e := runCtl(t, "", latch(args...)...); code != 2 {
			t.Errorf("latch %v: exit %d, want 2 (usage): %s", args, code, e)
		}
	}
	if code, out, e := runCtl(t, "", latch("count", "l1", "-limit", "2", "-o", "json")...); code != 0 || !strings.Contains(out, `"left":2`) {
		t.Fatalf("latch count: exit %d, %q %s", code, out, e)
	}
	if code, out, _ := runCtl(t, "", latch("wait", "l1", "-limit", "2", "-wait", "300ms")...); code != exitNotAcquired || !strings.Contains(out, "not_open") {
		t.Fatalf("latch wait on a closed latch with -wait: exit %d, %q; want %d", code, out, exitNotAcquired)
	}
	waited, waitOut, waitErr := background(context.Background(), nil, latch("wait", "l1", "-limit", "2", "-o", "json")...)
	c := n.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	testutil.Eventually(t, 30*time.Second, func() bool {
		st, err := c.State(ctx, "l1/waiting")
		return err == nil && st.Held
	}, "latch wait did not register")
	var downs []<-chan int
	var outs []*testutil.Buffer
	for range 2 {
		done, out, _ := background(context.Background(), nil, latch("countdown", "l1", "-limit", "2", "-o", "json")...)
		downs, outs = append(downs, done), append(outs, out)
	}
	for i, done := range downs {
		if code := exitOf(t, done); code != 0 || !strings.Contains(outs[i].String(), `"open"`) {
			t.Fatalf("latch countdown: exit %d, %q", code, outs[i].String())
		}
	}
	if code := exitOf(t, waited); code != 0 || !strings.Contains(waitOut.String(), `"open"`) {
		t.Fatalf("latch wait: exit %d, %q %s", code, waitOut.String(), waitErr.String())
	}
}

func TestBarrierCLI(t *testing.T) {
	n := startNode(t)
	barrier := func(args ...string) []string {
		return append(append(append([]string{}, n.flags...), "barrier"), args...)
	}
	for _, args := range [][]string{{"hold"}, {"enter", "b1", "--", "true"}, {"enter", "b1", "-limit", "2"}, {"wait", "b1", "--", "true"}} {
		if code, _, e := runCtl(t, "", barrier(args...)...); code != 2 {
			t.Errorf("barrier %v: exit %d, want 2 (usage): %s", args, code, e)
		}
	}
	if code, out, e := runCtl(t, "", barrier("wait", "b1")...); code != 0 || !strings.Contains(out, "passed") {
		t.Fatalf("barrier wait on a free barrier: exit %d, %q %s", code, out, e)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	held, heldOut, heldErr := background(ctx, nil, barrier("hold", "b1", "-o", "json")...)
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(heldOut.String(), `"held"`) }, "held: %q %q", heldOut.String(), heldErr.String())
	if code, out, _ := runCtl(t, "", barrier("hold", "b1")...); code != exitNotAcquired || !strings.Contains(out, "not_held") {
		t.Fatalf("a second barrier hold: exit %d, %q; want %d", code, out, exitNotAcquired)
	}
	if code, out, _ := runCtl(t, "", barrier("wait", "b1", "-wait", "300ms")...); code != exitNotAcquired {
		t.Fatalf("barrier wait while held: exit %d, %q; want %d", code, out, exitNotAcquired)
	}
	waited, waitOut, _ := background(context.Background(), nil, barrier("wait", "b1")...)
	stop()
	if code := exitOf(t, held); code != 0 || !strings.Contains(heldOut.String(), `"released"`) {
		t.Fatalf("barrier hold interrupted: exit %d, %q", code, heldOut.String())
	}
	if code := exitOf(t, waited); code != 0 || !strings.Contains(waitOut.String(), "passed") {
		t.Fatalf("barrier wait: exit %d, %q", code, waitOut.String())
	}
	// A double barrier of 2: each runs its command once both entered.
	var dones []<-chan int
	var errs []*testutil.Buffer
	for range 2 {
		done, _, errOut := background(context.Background(), nil, barrier("enter", "d1", "-limit", "2", "--", "sh", "-c", "exit 3")...)
		dones, errs = append(dones, done), append(errs, errOut)
	}
	for i, done := range dones {
		if code := exitOf(t, done); code != 3 {
			t.Fatalf("barrier enter: exit %d, want CMD's 3: %s", code, errs[i].String())
		}
	}
}
