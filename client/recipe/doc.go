// Package recipe builds coordination recipes on paxlock's client
// primitives, the way etcd's clientv3/concurrency builds on etcd: a
// count-down latch (Latch), a barrier (Barrier) and a double barrier
// (DoubleBarrier), a non-reentrant mutex (Mutex) and a read-write lock
// whose one upgradable reader can become the writer (UpgradableRWMutex).
//
// # What a recipe's state is made of
//
// paxlock stores nothing but holds: a lock, a read lock or semaphore
// permits, each leased with a TTL and renewed by its client (every hold a
// recipe takes has client.AutoRenew), replicated by Paxos with its holder
// value. A recipe's state is therefore the set of holds its participants
// keep, and it lasts as long as they do:
//
//   - A participant that closes its client, or dies and stops renewing,
//     takes its part of the state with it (at once on Close, after its TTL
//     otherwise). Each recipe's documentation says what that means for it.
//   - Nothing a recipe keeps is lost by a master change: holds and their
//     values are replicated, the new master restarts every deadline in
//     full, and the client re-sends its requests and re-registers its
//     watches by itself. A call that ran out of retries while the key's
//     group had no master returns an error wrapping client.ErrNoMaster,
//     client.ErrUnavailable or client.ErrTimeout; every recipe call may be
//     made again after such an error and then picks up where it was.
//
// Waiting (Latch.Wait, Barrier.Wait, DoubleBarrier.Enter and Leave) is
// woken by the server's watch pushes: a continuous watch is registered
// first and the state read after it, then again after each event, so no
// change between the two is missed. No polling is needed: the client
// registers the watches again after a reconnect, a view naming a new
// master, or the master's own word that it dropped them (a master that
// steps down while cut off from its peers tells its watches so over the
// connections it keeps).
//
// # Keys
//
// A recipe named name uses the key name, and some use a second key made
// from it (Latch: name+"/waiting" and name+"/open"; DoubleBarrier: name+"/ready";
// UpgradableRWMutex: name+"/upgrade"). A key has one kind (a mutex, a read-write lock or a
// semaphore), so a name given to one recipe must not be used as a plain
// lock of another kind.
package recipe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client"
)

// ErrInvalid is client.ErrInvalid: a recipe made with a bad argument (a
// count below 1, an empty name) returns an error wrapping it from every
// method, and sends nothing.
var ErrInvalid = client.ErrInvalid

// invalid is an error wrapping ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("recipe: %w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// holdOptions are the options of every hold a recipe takes: auto-renewed,
// then the caller's (TTL, Value, Weight...).
func holdOptions(opts []client.Option) []client.Option {
	return append([]client.Option{client.AutoRenew()}, opts...)
}

// transient reports whether err is one a retry can cure: no master, no
// node reachable, overloaded, or a request timeout, which a master change
// can cause.
func transient(err error) bool {
	return errors.Is(err, client.ErrNoMaster) || errors.Is(err, client.ErrUnavailable) ||
		errors.Is(err, client.ErrOverloaded) || errors.Is(err, client.ErrTimeout)
}

// retryPause is how long waitFor waits after a transient error of its
// check before it checks again.
const retryPause = 200 * time.Millisecond

// waitFor returns once done reports true. It registers a continuous watch
// on each key first, then calls done, and calls it again after every
// event on any key, so that a change made between the watch's
// registration and the check is seen. A transient error of done (a
// master change) is retried after retryPause; any other error, ctx's end
// or a watch that ends is returned.
func waitFor(ctx context.Context, c *client.Client, keys []string, done func(context.Context) (bool, error)) error {
	kick := make(chan struct{}, 1)
	ended := make(chan error, len(keys))
	for _, k := range keys {
		w, err := c.Watch(ctx, k, 0, client.Continuous())
		if err != nil {
			return fmt.Errorf("recipe: watch %q: %w", k, err)
		}
		defer func() { _ = w.Close() }()
		go forward(w, k, kick, ended)
	}
	for {
		ok, err := done(ctx)
		switch {
		case ok:
			return nil
		case err != nil && !transient(err):
			return err
		case err != nil:
			kickLater(ctx, kick)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("recipe: %w", ctx.Err())
		case err := <-ended:
			return err
		case <-kick:
		}
	}
}

// forward turns w's events into kicks (coalesced: the check reads the
// latest state) and reports the watch's end on ended.
func forward(w *client.Watcher, key string, kick chan<- struct{}, ended chan<- error) {
	for range w.Events() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	err := w.Err()
	if err == nil {
		err = client.ErrClosed // ended without a cause: closed by waitFor or the client
	}
	ended <- fmt.Errorf("recipe: watch of %q ended: %w", key, err)
}

// kickLater kicks once retryPause has passed, unless ctx ends first.
func kickLater(ctx context.Context, kick chan<- struct{}) {
	go func() {
		t := time.NewTimer(retryPause)
		defer t.Stop()
		select {
		case <-t.C:
			select {
			case kick <- struct{}{}:
			default:
			}
		case <-ctx.Done():
		}
	}()
}
