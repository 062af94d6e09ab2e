package recipe_test

// These examples run against a 3-node cluster started in this process by
// package paxlocktest; a program connects with its own client.Config.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
	"github.com/paxlock/paxlock/paxlocktest"
)

var (
	exampleOnce    sync.Once
	exampleCluster *paxlocktest.Cluster
)

// connect returns a client of the examples' cluster, started on first use.
func connect(ctx context.Context) *client.Client {
	exampleOnce.Do(func() {
		cl, err := paxlocktest.New(context.Background(), 3, paxlocktest.Options{})
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

func TestMain(m *testing.M) {
	code := m.Run()
	if exampleCluster != nil {
		_ = exampleCluster.Close()
	}
	os.Exit(code)
}

// Three workers count a latch down; the coordinator waits for them. A
// CountDown lasts as long as its permit: each worker keeps its handle
// until the coordinator is done, and Close gives the permit back.
func Example_latch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	opened := make(chan struct{})
	for range 3 {
		wg.Go(func() {
			c := connect(ctx) // another process, in real life
			defer c.Close()
			l := recipe.NewLatch(c, "import:done", 3)
			if err := l.CountDown(ctx); err != nil {
				log.Print(err)
				return
			}
			<-opened
			if err := l.Close(ctx); err != nil {
				log.Print(err)
			}
		})
	}
	c := connect(ctx)
	defer c.Close()
	if err := recipe.NewLatch(c, "import:done", 3).Wait(ctx); err != nil { // woken by a watch push
		log.Fatal(err)
	}
	fmt.Println("all three workers are done")
	close(opened)
	wg.Wait()
	// Output: all three workers are done
}

// A deployer holds a barrier while it migrates; workers wait for it.
func Example_barrier() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx)
	defer c.Close()
	gate := recipe.NewBarrier(c, "deploy:migrate")
	if err := gate.Hold(ctx); err != nil {
		log.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- recipe.NewBarrier(c, "deploy:migrate").Wait(ctx) }()
	fmt.Println("migrating")
	if err := gate.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if err := <-waited; err != nil {
		log.Fatal(err)
	}
	fmt.Println("workers go on")
	// Output:
	// migrating
	// workers go on
}

// Two participants start and finish a step together.
func Example_doubleBarrier() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx)
	defer c.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var lines []string
	for _, name := range []string{"a", "b"} {
		b := recipe.NewDoubleBarrier(c, "step:7", 2)
		wg.Go(func() {
			if err := b.Enter(ctx); err != nil { // returns once both entered
				log.Print(err)
				return
			}
			mu.Lock()
			lines = append(lines, name+" computes")
			mu.Unlock()
			if err := b.Leave(ctx); err != nil { // returns once both left
				log.Print(err)
			}
		})
	}
	wg.Wait()
	fmt.Println(len(lines), "participants computed")
	// Output: 2 participants computed
}

// A second Lock by the holder fails at once instead of counting.
func Example_mutex() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx)
	defer c.Close()
	m := recipe.NewMutex(c, "ledger")
	if err := m.Lock(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = m.Unlock(ctx) }()
	err := m.Lock(ctx)
	fmt.Println(errors.Is(err, recipe.ErrReentrant))
	fmt.Println("token", m.Client().Token() > 0)
	// Output:
	// true
	// token true
}

// Read, decide, and write only if needed, without letting another writer in
// between and without deadlocking against another upgrader.
func Example_upgradableRWMutex() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := connect(ctx)
	defer c.Close()
	u := recipe.NewUpgradableRWMutex(c, "catalog")
	if err := u.UpgradableRLock(ctx); err != nil { // plain readers (RLock) still share
		log.Fatal(err)
	}
	stale := true // read the catalog, find it stale
	if stale {
		if err := u.Upgrade(ctx); err != nil { // waits for the plain readers to leave
			log.Fatal(err)
		}
		fmt.Println("rewriting the catalog")
		if err := u.Downgrade(ctx); err != nil { // back to the upgradable read, atomically
			log.Fatal(err)
		}
	}
	if err := u.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: rewriting the catalog
}
