package clienttests_test

// These examples run against a 3-node cluster started in this process by
// package paxlocktest (connect below); a program names its own registry,
// namespace and secret, as ExampleNew shows.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/paxlocktest"
)

var (
	exampleOnce    sync.Once
	exampleCluster *paxlocktest.Cluster
)

// connect returns a client of the examples' cluster, started on first use
// and stopped after every test and example (TestMain).
func connect(ctx context.Context) *client.Client {
	exampleOnce.Do(func() {
		cl, err := paxlocktest.New(context.Background(), 3, paxlocktest.Options{Namespace: "orders", Secret: "orders-secret"})
		if err != nil {
			log.Fatal(err)
		}
		exampleCluster = cl
	})
	c, err := client.New(ctx, exampleCluster.ClientConfig())
	if err != nil {
		log.Fatal(err)
	}
	return c
}

// Connect once per process and namespace, and share the client.
func Example_new() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{
		Registry:  []string{"10.0.0.1:7100", "10.0.0.2:7100"},
		Namespace: "orders",
		Secret:    "orders-secret",
	})
	switch {
	case errors.Is(err, client.ErrAuth):
		log.Fatal("wrong namespace or secret")
	case err != nil:
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("groups:", c.View().GroupCount())
}

// A blocking lock with a deadline, auto-renewed, whose fencing token guards
// the write it protects.
func Example_clientMutex() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	m := c.Mutex("order:42", client.TTL(30*time.Second), client.AutoRenew(), client.Weight(5))
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := m.Lock(lctx); err != nil { // waits on the server, woken by push
		log.Fatal(err)
	}
	defer func() {
		if err := m.Unlock(ctx); errors.Is(err, client.ErrLockLost) {
			log.Print("the lock was lost before Unlock: check the work")
		}
	}()

	work, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-m.Lost(): // expired, revoked, or renewals failed
			stop()
		case <-work.Done():
		}
	}()
	fmt.Println("writing, every write fenced with token", m.Token() > 0)
	// Output: writing, every write fenced with token true
}

// TryLock never waits; the error names the holder.
func Example_mutexTryLock() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	m := c.Mutex("report:daily")
	err := m.TryLock(ctx)
	var held *client.LockedError
	switch {
	case errors.As(err, &held):
		fmt.Printf("busy: held by %v for %v more\n", held.Holder, held.TTLLeft)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer func() {
		if err := m.Unlock(ctx); err != nil {
			log.Print(err) // the lock runs out with its TTL
		}
	}()
	fmt.Println("generating the report")
	// Output: generating the report
}

// A handle is reentrant: the lock is released by the last Unlock.
func Example_mutexLockReentrant() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	m := c.Mutex("account:7")
	_ = m.Lock(ctx)
	_ = m.Lock(ctx)   // same handle: counts, keeps the token
	_ = m.Unlock(ctx) // still held
	fmt.Println("held:", m.Held())
	_ = m.Unlock(ctx) // released
	fmt.Println("held:", m.Held())
	// Output:
	// held: true
	// held: false
}

// Every ProcessOwner handle of a key shares one owner, like WLock's process
// lock: a lock taken in one goroutine can be released in another.
func Example_processOwner() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	if err := c.Mutex("migration", client.ProcessOwner()).Lock(ctx); err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		err := c.Mutex("migration", client.ProcessOwner()).Unlock(ctx)
		fmt.Println("released in another goroutine:", err == nil)
	}()
	<-done
	// Output: released in another goroutine: true
}

// Readers share the lock; a writer excludes them, and waiting writers go
// before new readers.
func Example_clientRWMutex() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	rw := c.RWMutex("catalog", client.TTL(10*time.Second))
	if err := rw.RLock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("reading")
	_ = rw.RUnlock(ctx)

	if err := rw.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("writing with a token above the reader's:", rw.Writer().Token() > 0)
	_ = rw.Unlock(ctx)
	// Output:
	// reading
	// writing with a token above the reader's: true
}

// Watch a key continuously; the client re-registers the watch after a
// reconnect or a master change.
func Example_clientWatch() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	w, err := c.Watch(ctx, "config:flags", 0, client.Continuous(), client.MaxWait(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	go func() { // another process takes and frees the key
		m := c.Mutex("config:flags", client.Value("deployer"))
		if err := m.Lock(ctx); err == nil {
			_ = m.Unlock(ctx)
		}
	}()
	n := 0
	for ev := range w.Events() {
		switch ev.Type {
		case client.EventAcquired:
			fmt.Println("taken")
		case client.EventReleased, client.EventExpired, client.EventRevoked:
			fmt.Println("free again")
		case client.EventTimeout:
			fmt.Println("watch ended")
		}
		if n++; n == 2 {
			w.Close()
		}
	}
	// Output:
	// taken
	// free again
}

// Leader election: campaign with a value, lead until leadership is lost,
// resign; anyone can read or follow the leader.
func Example_clientElection() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	e := c.Election("scheduler", client.TTL(15*time.Second))
	if err := e.Campaign(ctx, "host-a:8080"); err != nil { // blocks until elected
		log.Fatal(err)
	}
	fmt.Println("leading")
	_ = e.Proclaim(ctx, "host-a:8081") // change the published value, same term
	if l, err := e.Leader(ctx); err == nil {
		fmt.Println("published:", l.Value)
	}
	select {
	case <-e.Lost(): // leadership lost: stop acting as leader
	default: // the work done
		_ = e.Resign(ctx) // hand over to the next candidate at once
	}
	// Output:
	// leading
	// published: host-a:8081
}

// Following an election: the current leader, then every change.
func Example_electionObserve() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := connect(ctx)
	defer c.Close()

	e := c.Election("scheduler")
	if _, err := e.Leader(ctx); errors.Is(err, client.ErrNoLeader) {
		fmt.Println("no leader yet")
	}
	go func() { // a candidate elsewhere
		cand := c.Election("scheduler")
		_ = cand.Campaign(ctx, "host-b:8080")
	}()
	for l := range e.Observe(ctx) {
		if l.Value != "" {
			fmt.Println("leader:", l.Value)
			cancel() // stop following
		}
	}
	// Output:
	// no leader yet
	// leader: host-b:8080
}

// A holder value tells contenders who holds a lock and what it is doing.
func Example_value() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	m := c.Mutex("order:42", client.Value("host-a pid 4711 job 17"))
	if err := m.TryLock(ctx); err != nil {
		var le *client.LockedError
		if errors.As(err, &le) {
			fmt.Println("busy:", le.Value)
		}
		return
	}
	_ = m.SetValue(ctx, "host-a pid 4711 job 17: step 2")
	fmt.Println(m.Value())
	_ = m.Unlock(ctx)
	// Output: host-a pid 4711 job 17: step 2
}

// State reads a key's holder, token and queue from the master.
func Example_clientState() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	st, err := c.State(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	if st.Held {
		fmt.Printf("%s held by %v (token %d, %v left, %d waiting)\n", st.Key, st.Holder, st.Token, st.TTLLeft, st.QueueLen)
	} else {
		fmt.Println(st.Key, "is free")
	}
	// Output: order:42 is free
}

// Code written against sync.Locker takes a paxlock lock through Locker. It
// has no fencing token and cannot say that the lock was lost: use the Mutex
// where that matters.
func Example_mutexLocker() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	// A sync.Locker; its Lock blocks until held and retries what a retry
	// can cure.
	mu := c.Mutex("report:daily", client.TTL(30*time.Second), client.AutoRenew()).Locker()
	mu.Lock()
	defer mu.Unlock()
	fmt.Println("generating the daily report")
	// Output: generating the daily report
}

// A writer that must go on reading what it wrote downgrades its lock, so
// no other writer gets in between.
func Example_rwMutexDowngrade() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	rw := c.RWMutex("catalog", client.TTL(30*time.Second))
	if err := rw.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	// ... write the catalog ...
	if err := rw.Downgrade(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = rw.RUnlock(ctx) }()
	fmt.Println("reading what was written, token kept:", rw.Reader().Token() > 0)
	// Output: reading what was written, token kept: true
}

// A semaphore of 10 permits shared by a fleet of workers: each takes as
// many as its job needs, waiting on the server (woken by push) while they
// are in use, and gives them back. A worker that dies without Release has
// its permits back when its grant's TTL passes.
func Example_clientSemaphore() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	s := c.Semaphore("gpu-pool", 10, client.TTL(30*time.Second), client.AutoRenew(), client.Value("worker-7"))
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var pe *client.PermitsError
	switch err := s.Acquire(actx, 3); {
	case errors.As(err, &pe):
		log.Fatalf("the pool has %d permits, not %d", pe.Have, pe.Want)
	case err != nil:
		log.Fatal(err)
	}
	defer func() {
		if err := s.Release(ctx); err != nil {
			log.Print(err)
		}
	}()
	st, err := s.State(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d permits in use by %d holders\n", st.InUse, st.Permits, len(st.Holders))
	select {
	case <-s.Lost():
		log.Print("permits lost: stop using the GPUs")
	default: // the job
	}
	// Output: 3 of 10 permits in use by 1 holders
}

// Move stock between two warehouses under both their locks: all or none,
// in one global order, so that a transfer the other way cannot deadlock
// with this one.
func Example_clientMultiLock() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	ml := c.MultiLock([]string{"stock:berlin", "stock:lyon"}, client.TTL(30*time.Second), client.AutoRenew())
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := ml.Lock(lctx); err != nil { // on failure none is held
		log.Fatal(err)
	}
	defer func() {
		if err := ml.Unlock(ctx); err != nil {
			log.Print(err)
		}
	}()
	fmt.Println("both held, each fenced:", ml.Token("stock:berlin") > 0 && ml.Token("stock:lyon") > 0)
	// Output: both held, each fenced: true
}

// Take two accounts' locks at once with TryLock: keys of one lock group
// are granted in one Paxos command, all or none, so nobody ever sees one
// of them held by this transfer and not the other.
func Example_multiLockTryLock() {
	ctx := context.Background()
	c := connect(ctx)
	defer c.Close()

	ml := c.MultiLock([]string{"acct:1", "acct:2"}, client.TTL(10*time.Second))
	var le *client.LockedError
	switch err := ml.TryLock(ctx); {
	case errors.As(err, &le):
		fmt.Println("busy:", le.Key, "is held by", le.Holder) // and ml holds none
		return
	case err != nil:
		log.Fatal(err)
	}
	defer func() { _ = ml.Unlock(ctx) }()
	fmt.Println("both held:", ml.Token("acct:1") > 0 && ml.Token("acct:2") > 0)
	// Output: both held: true
}
