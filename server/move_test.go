package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
)

// movePost takes a move step over admin address addr and returns the
// HTTP status.
func movePost(t *testing.T, addr, ns, step string, body any) int {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post("http://"+addr+"/moves/"+ns+"/"+step, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Logf("%s: %s %s", step, resp.Status, bytes.TrimSpace(msg))
	}
	return resp.StatusCode
}

// moveStep is movePost that must succeed.
func moveStep(t *testing.T, addr, ns, step string, body any) {
	t.Helper()
	if code := movePost(t, addr, ns, step, body); code != http.StatusOK {
		t.Fatalf("%s at %s: HTTP %d", step, addr, code)
	}
}

func moveStatus(t *testing.T, addr, ns string) adminapi.MoveStatus {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/moves/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st adminapi.MoveStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// copyMove exports ns from every group of the source (admin address
// from) and imports each batch into the target (admin address to), each
// batch twice; then it raises the target's versions above every source
// group's. It returns the number of locks exported.
func copyMove(t *testing.T, from, to, ns, id string) int {
	t.Helper()
	src := moveStatus(t, from, ns)
	var ver uint64
	locks := 0
	for _, g := range src.Groups {
		resp, err := http.Get(fmt.Sprintf("http://%s/moves/%s/export?group=%d&id=%s", from, ns, g.Group, id))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 8<<20)
		end := false
		for sc.Scan() {
			var line adminapi.MoveExportLine
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if line.Error != "" {
				t.Fatalf("export group %d: %s", g.Group, line.Error)
			}
			if line.End {
				end = true
				locks += line.Locks
				ver = max(ver, line.Version)
				break
			}
			imp := adminapi.MoveImport{ID: id, SrcGroup: g.Group, Batch: line.Batch, Pairs: line.Pairs}
			moveStep(t, to, ns, "import", imp)
			moveStep(t, to, ns, "import", imp) // repeated: changes nothing
		}
		resp.Body.Close()
		if !end {
			t.Fatalf("export of group %d ended without its end line (HTTP %s)", g.Group, resp.Status)
		}
	}
	for _, g := range moveStatus(t, to, ns).Groups {
		ver = max(ver, g.Version)
	}
	moveStep(t, to, ns, "version", adminapi.MoveStep{Min: ver + 1})
	return locks
}

// TestMoveNamespaceServer moves namespace "ns" from a three-node cluster
// to a one-node cluster of another group count, over the admin API, step
// by step: first a move aborted after the copy, which leaves the source
// serving with nothing lost and the target without the namespace, then a
// move to the end. Holds (a mutex and a semaphore with values, two
// readers) survive with their tokens; requests during the freeze wait
// (MOVING); after the drop the source answers MOVED and the client
// follows to the target, where its holds renew; tokens granted at the
// target exceed every token of the source; every step repeated succeeds.
func TestMoveNamespaceServer(t *testing.T) {
	t.Parallel()
	src := startCluster(t, 3)
	dst := startClusterWith(t, 1, func(c *Config) {
		c.Groups = 7
		c.Namespaces = []Namespace{{Name: "other", Secret: "x"}}
	})
	sAdmin, sAdmin2, tAdmin := src.cfgs[0].AdminAddr, src.cfgs[1].AdminAddr, dst.cfgs[0].AdminAddr
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Retries bounded by the test's context, not by count: a loaded
	// machine's elections take longer than the default retries span.
	c, err := client.New(ctx, client.Config{Registry: src.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	m := c.Mutex("m", client.Value("mv"), client.TTL(2*time.Minute))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	sem := c.Semaphore("sem", 5, client.Value("sv"), client.TTL(2*time.Minute))
	if err := sem.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r1, r2 := c.RWMutex("rw", client.TTL(2*time.Minute)), c.RWMutex("rw", client.TTL(2*time.Minute))
	if err := r1.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r2.RLock(ctx); err != nil {
		t.Fatal(err)
	}
	maxSrc := slices.Max([]uint64{m.Token(), sem.Token(), r1.Reader().Token(), r2.Reader().Token()})
	for i := range 30 {
		k := c.Mutex(fmt.Sprintf("churn-%d", i))
		if err := k.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		maxSrc = max(maxSrc, k.Token())
		if err := k.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	verifier := moveStatus(t, sAdmin, "ns").Verifier
	if len(verifier) == 0 {
		t.Fatal("no verifier in the source's move status")
	}

	// A move aborted after the copy.
	moveStep(t, tAdmin, "ns", "incoming", adminapi.MoveStep{ID: "a1", Verifier: verifier})
	moveStep(t, sAdmin2, "ns", "freeze", adminapi.MoveStep{ID: "a1"})
	if n := copyMove(t, sAdmin, tAdmin, "ns", "a1"); n != 3 {
		t.Fatalf("exported %d locks, want 3 (m, sem, rw)", n)
	}
	if code := movePost(t, sAdmin, "ns", "drop", adminapi.MoveStep{ID: "other-move", MovedTo: "x:1"}); code != http.StatusConflict {
		t.Fatalf("drop of another move: HTTP %d, want 409", code)
	}
	moveStep(t, tAdmin, "ns", "unfreeze", adminapi.MoveStep{ID: "a1"})
	moveStep(t, tAdmin, "ns", "unfreeze", adminapi.MoveStep{ID: "a1"})
	moveStep(t, sAdmin, "ns", "unfreeze", adminapi.MoveStep{ID: "a1"})
	for _, g := range moveStatus(t, tAdmin, "ns").Groups {
		if g.State != "none" || g.Locks != 0 {
			t.Fatalf("target group %d after the abort: %+v", g.Group, g)
		}
	}
	if slices.Contains(dst.nodes[0].svc.Namespaces(), "ns") {
		t.Fatal("the target kept the namespace after the abort")
	}
	if err := m.Renew(ctx, 0); err != nil {
		t.Fatalf("renew at the source after the abort: %v", err)
	}

	// Two waiters queue on m at the source, A well before B; each
	// re-sends its wait to the target on its own after the move, in
	// whatever order, and the target must serve A first.
	waiters := queueMoveWaiters(ctx, t, src, m, "A", "B")

	// The move.
	const id = "m2"
	moveStep(t, tAdmin, "ns", "incoming", adminapi.MoveStep{ID: id, Verifier: verifier})
	moveStep(t, tAdmin, "ns", "incoming", adminapi.MoveStep{ID: id, Verifier: verifier})
	moveStep(t, sAdmin2, "ns", "freeze", adminapi.MoveStep{ID: id})
	moveStep(t, sAdmin, "ns", "freeze", adminapi.MoveStep{ID: id})
	fctx, fcancel := context.WithTimeout(ctx, time.Second)
	err = c.Mutex("during").TryLock(fctx)
	fcancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "MOVING") {
		t.Fatalf("a try-lock during the freeze: %v, want to wait on MOVING until its context ends", err)
	}
	if n := copyMove(t, sAdmin, tAdmin, "ns", id); n != 3 {
		t.Fatalf("exported %d locks, want 3 (m, sem, rw)", n)
	}
	moveStep(t, tAdmin, "ns", "own", adminapi.MoveStep{ID: id})
	moveStep(t, tAdmin, "ns", "own", adminapi.MoveStep{ID: id})
	to := strings.Join(dst.clientAddrs(), ",")
	moveStep(t, sAdmin, "ns", "drop", adminapi.MoveStep{ID: id, MovedTo: to})
	moveStep(t, sAdmin2, "ns", "drop", adminapi.MoveStep{ID: id, MovedTo: to})
	for _, g := range moveStatus(t, sAdmin, "ns").Groups {
		if g.State != "dropped" || g.Locks != 0 || g.MovedTo != to {
			t.Fatalf("source group %d after the drop: %+v", g.Group, g)
		}
	}

	// The holder follows MOVED and renews at the target.
	tok := m.Token()
	if err := m.Renew(ctx, 0); err != nil {
		t.Fatalf("renew after the move: %v", err)
	}
	if m.Token() != tok || !m.Held() {
		t.Fatalf("after the move: token %d, want %d (held %v)", m.Token(), tok, m.Held())
	}
	if a, _ := c.View().MasterAddr(0); !slices.Contains(dst.clientAddrs(), a) {
		t.Fatalf("the client's view after the move names %q, not the target", a)
	}
	st, err := c.State(ctx, "m")
	if err != nil || st.Token != tok || st.Value != "mv" {
		t.Fatalf("m at the target: %+v, %v", st, err)
	}
	ss, err := sem.State(ctx)
	if err != nil || ss.InUse != 2 || ss.Permits != 5 {
		t.Fatalf("semaphore at the target: %+v, %v", ss, err)
	}
	if err := r1.RUnlock(ctx); err != nil {
		t.Fatalf("read unlock at the target: %v", err)
	}
	// Tokens at the target exceed every source token, on a key the
	// source held and on a new one; m's waiters, once both re-queued at
	// the target, get it in their order.
	waitQueueLen(ctx, t, c, "m", len(waiters.names))
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waiters.servedInOrder(ctx, t, maxSrc)
	for _, key := range []string{"m", "churn-3", "fresh"} {
		k := c.Mutex(key)
		if err := k.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if k.Token() <= maxSrc {
			t.Fatalf("token of %s at the target %x, not above the source's %x", key, k.Token(), maxSrc)
		}
	}
	// The source answers MOVED with the target's addresses.
	rc := src.masterConn("ns", "m", 77)
	if r := rc.callMaster(wire.TypeState, &wire.State{Key: "m"}); r.Status != wire.StatusMoved || r.Redirect != to {
		t.Fatalf("state at the source after the drop: %v %q, want MOVED %q", r.Status, r.Redirect, to)
	}
}

// moveWaiters are blocking Locks queued on one key, each on its own
// client, in the order of names.
type moveWaiters struct {
	names []string
	ms    []*client.Mutex
	done  chan int // the index of each waiter whose Lock returned nil
	errs  chan error
}

// queueMoveWaiters queues one waiter per name on m's key, each on a new
// client of cl, the next only once the previous one is queued and 500 ms
// have passed, so that their arrivals are well apart.
func queueMoveWaiters(ctx context.Context, t *testing.T, cl *testCluster, m *client.Mutex, names ...string) *moveWaiters {
	t.Helper()
	w := &moveWaiters{names: names, done: make(chan int, len(names)), errs: make(chan error, len(names))}
	for i := range names {
		c, err := client.New(ctx, client.Config{Registry: cl.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: 1000})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wm := c.Mutex(m.Key(), client.TTL(2*time.Minute))
		w.ms = append(w.ms, wm)
		go func() {
			if err := wm.Lock(ctx); err != nil {
				w.errs <- fmt.Errorf("waiter %s: %w", names[i], err)
				return
			}
			w.done <- i
		}()
		waitQueueLen(ctx, t, c, m.Key(), i+1)
		time.Sleep(500 * time.Millisecond)
	}
	return w
}

// servedInOrder checks, once the key is released, that the waiters get
// it one after the other in their queueing order, each with a token
// above floor and the one before, and releases each.
func (w *moveWaiters) servedInOrder(ctx context.Context, t *testing.T, floor uint64) {
	t.Helper()
	for want := range w.names {
		select {
		case got := <-w.done:
			if got != want {
				t.Fatalf("waiter %s was served before waiter %s: the target lost the queue's order", w.names[got], w.names[want])
			}
		case err := <-w.errs:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("waiter %s not served: %v", w.names[want], ctx.Err())
		}
		m := w.ms[want]
		if m.Token() <= floor {
			t.Fatalf("waiter %s's token %x not above %x", w.names[want], m.Token(), floor)
		}
		floor = m.Token()
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// waitQueueLen waits until key's queue, as c's State sees it, holds n
// waiters.
func waitQueueLen(ctx context.Context, t *testing.T, c *client.Client, key string, n int) {
	t.Helper()
	for {
		st, err := c.State(ctx, key)
		if err == nil && st.QueueLen == n {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s's queue never held %d waiters (last: %+v, %v)", key, n, st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
