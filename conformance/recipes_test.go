package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// The recipes' scenarios: the maximum hold time, the prefix watch and a
// semaphore's partial release, each expressed by every client that can
// (see doc.go for what curl cannot).

// pyMaxHold takes key with max_hold (argv[6] seconds, TTL 3 s, renewed),
// prints its token, waits for lost and prints lost_reason.
const pyMaxHold = `
import sys, paxlock
url, ns, secret, ca, key, bound = sys.argv[1:7]
c = paxlock.Client(url, ns, secret, ca_file=ca or None)
m = c.mutex(key, ttl=3, max_hold=float(bound))
m.acquire()
print(m.token, flush=True)
print("lost: " + m.lost_reason if m.lost.wait(30) else "held", flush=True)
m.release()
`

// TestMaxHoldAcrossClients: a Go hold and a Python hold, each with a 3 s
// TTL renewed all along and a 4 s maximum hold time, are ended by their
// masters at the bound and each holder knows it (Go: ErrHoldLimit;
// Python: lost, naming the maximum hold time) before a curl waiter is
// granted the key; curl's max_hold_ms below its ttl_ms is refused
// INVALID_ARGUMENT and takes nothing.
func TestMaxHoldAcrossClients(t *testing.T) {
	e := setup(t)
	k := key("maxhold")
	m := e.goClient(t).Mutex(k, client.TTL(3*time.Second), client.AutoRenew(), client.MaxHold(4*time.Second))
	if err := m.Lock(t.Context()); err != nil {
		t.Fatal(err)
	}
	curlTok := e.curlGrantedAfterLoss(t, m, "mh-waiter", 30000)
	if cause := context.Cause(m.Context()); !errors.Is(cause, client.ErrHoldLimit) {
		t.Fatalf("the Go hold's end: %v, want ErrHoldLimit", cause)
	}
	_ = m.Unlock(t.Context())
	_, _, _ = e.curl(t, 1, "Release", map[string]any{"key": k, "owner": "mh-waiter", "token": strconv.FormatUint(curlTok, 10)}, e.sec)

	py := e.pyRun(t, pyMaxHold, k, "4")
	if _, err := strconv.ParseUint(py.line(t), 10, 64); err != nil {
		t.Fatal(err)
	}
	if got := py.line(t); !strings.Contains(got, "maximum hold time") {
		t.Fatalf("the Python hold after its bound: %q", got)
	}
	py.release(t)

	free := key("maxhold-bound")
	if code, st, _ := e.curl(t, 0, "Acquire", map[string]any{"key": free, "owner": "o", "ttl_ms": 10000, "max_hold_ms": 9999}, e.sec); code != http.StatusBadRequest || st != "BAD_REQUEST" {
		t.Fatalf("curl max_hold_ms below ttl_ms: HTTP %d %s, want 400 BAD_REQUEST", code, st)
	}
	if _, _, s := e.curl(t, 0, "State", map[string]any{"key": free}, e.sec); s["state"].(map[string]any)["held"] == true {
		t.Fatal("a refused acquire took the key")
	}
}

// pyWatchPrefix prints "key kind" for each event of a watch of argv[5],
// until its standard input closes.
const pyWatchPrefix = `
import os, sys, threading, paxlock
url, ns, secret, ca, prefix = sys.argv[1:6]
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
c = paxlock.Client(url, ns, secret, ca_file=ca or None)
for ev in c.watch_prefix(prefix, max_wait=60):
    print(ev.key, ev.kind, flush=True)
`

// TestWatchPrefixAcrossClients: a Go WatchPrefix and a Python
// watch_prefix of one prefix both report the acquisitions and releases
// that curl makes of keys under it, and nothing of a key outside it.
// Each watch is known registered once it reports a probe key, taken with
// curl until it shows.
func TestWatchPrefixAcrossClients(t *testing.T) {
	e := setup(t)
	prefix := key("wp") + "/"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	goEvents, err := e.goClient(t).WatchPrefix(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	pyLines := make(chan string, 256)
	py := e.pyRun(t, pyWatchPrefix, prefix)
	go func() {
		defer close(pyLines)
		for {
			s, err := py.out.ReadString('\n')
			if err != nil {
				return
			}
			pyLines <- strings.TrimSpace(s)
		}
	}()
	touch := func(k string) {
		code, _, a := e.curl(t, 0, "Acquire", map[string]any{"key": k, "owner": "wp", "ttl_ms": 10000}, e.sec)
		if code != http.StatusOK {
			t.Fatalf("curl Acquire %s: HTTP %d %v", k, code, a)
		}
		if code, _, r := e.curl(t, 1, "Release", map[string]any{"key": k, "owner": "wp", "token": a["token"]}, e.sec); code != http.StatusOK {
			t.Fatalf("curl Release %s: HTTP %d %v", k, code, r)
		}
	}
	goSeen, pySeen := map[string]bool{}, map[string]bool{}
	drain := func() {
		for {
			select {
			case ev, ok := <-goEvents:
				if !ok {
					t.Fatal("the Go watch ended")
				}
				if ev.Type == client.EventMoved {
					t.Log("the Go watch re-registered with a new master: events may be missing")
				}
				goSeen[ev.Key+" "+ev.Type.String()] = true
			case l, ok := <-pyLines:
				if !ok {
					t.Fatal("the Python watch ended")
				}
				pySeen[l] = true
			default:
				return
			}
		}
	}
	probe := prefix + "probe"
	deadline := time.Now().Add(30 * time.Second)
	for !goSeen[probe+" acquired"] || !pySeen[probe+" WATCH_EVENT_KIND_ACQUIRED"] {
		if time.Now().After(deadline) {
			t.Fatalf("the watches never reported the probe: Go %v, Python %v", goSeen, pySeen)
		}
		touch(probe)
		time.Sleep(100 * time.Millisecond)
		drain()
	}
	touch("x" + prefix + "outside")
	keys := []string{prefix + "a", prefix + "b", prefix + "c", prefix + "d"}
	for _, k := range keys {
		touch(k)
	}
	deadline = time.Now().Add(30 * time.Second)
	for _, k := range keys {
		for !(goSeen[k+" acquired"] && goSeen[k+" released"] && pySeen[k+" WATCH_EVENT_KIND_ACQUIRED"] && pySeen[k+" WATCH_EVENT_KIND_RELEASED"]) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Go saw %v, Python %v", k, goSeen, pySeen)
			}
			time.Sleep(20 * time.Millisecond)
			drain()
		}
	}
	for ev := range goSeen {
		if !strings.HasPrefix(ev, prefix) {
			t.Fatalf("Go event %q outside the prefix", ev)
		}
	}
	for ev := range pySeen {
		if !strings.HasPrefix(ev, prefix) {
			t.Fatalf("Python event %q outside the prefix", ev)
		}
	}
	_ = py.stdin.Close()
}

// pyPartial takes 3 of 3 permits of argv[5], prints its token, and on a
// line of input gives 2 back and prints held_permits and the token.
const pyPartial = `
import sys, paxlock
url, ns, secret, ca, key = sys.argv[1:6]
c = paxlock.Client(url, ns, secret, ca_file=ca or None)
s = c.semaphore(key, limit=3, permits=3, ttl=20)
s.acquire()
print(s.token, flush=True)
sys.stdin.readline()
s.release(permits=2)
print(s.held_permits, s.token, flush=True)
sys.stdin.read()
s.release()
`

// TestPartialReleaseAcrossClients: a Python holder of 3 of 3 permits
// gives 2 back, keeping 1 and its token, and a Go waiter for 2 is granted
// by that release; the Go holder gives back one of its permits by id and
// a curl waiter for 1 is granted; curl's own partial release keeps its
// token and answers the permits kept, and keeping more than it holds is
// INVALID_ARGUMENT.
func TestPartialReleaseAcrossClients(t *testing.T) {
	e := setup(t)
	k := key("partial")
	py := e.pyRun(t, pyPartial, k)
	pyTok := py.line(t)
	gs := e.goClient(t).Semaphore(k, 3, client.TTL(20*time.Second))
	granted := make(chan error, 1)
	go func() { granted <- gs.Acquire(t.Context(), 2) }()
	waitQueued(t, e, k)
	if _, err := py.stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if got := py.line(t); got != "1 "+pyTok {
		t.Fatalf("the Python holder after giving 2 back: %q, want 1 permit and token %s", got, pyTok)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the Go waiter for 2: %v", err)
	}
	waiter := make(chan map[string]any, 1)
	go func() { // e.curl's t.Fatal is for the test's goroutine: this one posts itself
		b, _ := json.Marshal(map[string]any{"key": k, "owner": "curl-sem", "kind": "LOCK_KIND_SEMAPHORE", "permits": 1, "limit": 3, "ttl_ms": 20000, "wait_ms": 20000})
		var a map[string]any
		r, err := http.NewRequest(http.MethodPost, e.apis[1%len(e.apis)]+"/paxlock.v1.LockService/Acquire", bytes.NewReader(b))
		if err == nil {
			r.Header.Set("Content-Type", "application/json")
			r.SetBasicAuth(e.ns, e.sec)
			if resp, err := e.http.Do(r); err == nil {
				_ = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
			}
		}
		waiter <- a
	}()
	waitQueued(t, e, k)
	goTok := gs.Token()
	if err := gs.ReleasePermits(t.Context(), gs.PermitIDs()[1]); err != nil {
		t.Fatal(err)
	}
	a := <-waiter
	if a["token"] == nil || gs.Token() != goTok {
		t.Fatalf("curl waiter after the Go holder gave one back: %v; Go's token %d, was %d", a, gs.Token(), goTok)
	}
	py.release(t) // frees the Python permit
	_ = gs.Release(t.Context())
	_, _, _ = e.curl(t, 1, "Release", map[string]any{"key": k, "owner": "curl-sem", "token": a["token"]}, e.sec)

	// curl holds 1 + its new 2 is not expressible (one grant per owner):
	// a fresh curl grant of 3 keeps 1.
	k2 := key("partial-curl")
	code, _, c := e.curl(t, 0, "Acquire", map[string]any{"key": k2, "owner": "curl", "kind": "LOCK_KIND_SEMAPHORE", "permits": 3, "limit": 3, "ttl_ms": 20000}, e.sec)
	if code != http.StatusOK {
		t.Fatalf("curl semaphore: HTTP %d %v", code, c)
	}
	code, _, r := e.curl(t, 0, "Release", map[string]any{"key": k2, "owner": "curl", "token": c["token"], "keep_permits": 1}, e.sec)
	if code != http.StatusOK || r["permits"] != float64(1) {
		t.Fatalf("curl keep 1 of 3: HTTP %d %v", code, r)
	}
	if code, st, _ := e.curl(t, 0, "Release", map[string]any{"key": k2, "owner": "curl", "token": c["token"], "keep_permits": 2}, e.sec); code != http.StatusBadRequest || st != "BAD_REQUEST" {
		t.Fatalf("curl keep 2 of 1: HTTP %d %s, want 400 BAD_REQUEST", code, st)
	}
	if _, _, ct := e.curl(t, 0, "CheckToken", map[string]any{"key": k2, "token": c["token"]}, e.sec); ct["current"] != true {
		t.Fatalf("curl's token after its partial release: %v", ct)
	}
	_, _, _ = e.curl(t, 0, "Release", map[string]any{"key": k2, "owner": "curl", "token": c["token"]}, e.sec)
}

// waitQueued waits until key's state shows a waiter.
func waitQueued(t *testing.T, e *env, k string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _, s := e.curl(t, 0, "State", map[string]any{"key": k}, e.sec)
		if st, _ := s["state"].(map[string]any); st != nil && st["queueLen"] != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no waiter queued after 30 s", k)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
