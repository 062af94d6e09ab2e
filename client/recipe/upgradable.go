// This file is the read-write lock with an upgradable reader:
// UpgradableRWMutex.

package recipe

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/paxlock/paxlock/client"
)

// UpgradableRWMutex is a read-write lock with, besides plain readers and
// writers, one upgradable reader at a time: a reader that can become the
// writer (Upgrade) without another writer getting in between, and without
// the deadlock of two readers that both upgrade (client.RWMutex refuses an
// upgrade for that reason).
//
// It is the read-write lock name and an exclusive lock name+"/upgrade",
// the gate. Writers (Lock) and the upgradable reader (UpgradableRLock)
// take the gate first, so there is at most one of them; plain readers
// (RLock) take only the read lock and share it with the upgradable
// reader. Upgrade releases the upgradable read and waits for the write
// lock; since only the gate's holder can write, the data it read is still
// the latest when the write is granted, even though plain readers may read
// meanwhile. Two would-be upgraders never wait for each other: the second
// waits for the gate. Every writer of name must use this type (a plain
// client.RWMutex writer would bypass the gate).
//
// One handle holds one mode at a time: a plain read (RLock/RUnlock), the
// upgradable read (UpgradableRLock, then Upgrade and Downgrade, any number
// of times), or the write (Lock); Unlock ends the last two.
//
// Failure semantics. The holds are leased and replicated: a master
// change is transparent to a holder, and a waiting call is re-queued by
// the client; a call that ran out of retries returns an error wrapping
// client.ErrNoMaster or client.ErrUnavailable and may be made again: the
// handle remembers how far it got (an Upgrade that failed after
// releasing the read waits for the write again). If the gate is lost
// (expired: the process paused past its TTL) another writer may have
// written: Upgrade then returns an error wrapping client.ErrLockLost, and
// the caller must read again.
type UpgradableRWMutex struct {
	name string
	gate *client.Mutex
	rw   *client.RWMutex
	err  error

	mu    sync.Mutex
	mode  umode
	token uint64 // the gate's token when taken, to see it lost and retaken
}

type umode int

const (
	modeNone    umode = iota
	modeRead          // a plain read lock
	modeUpRead        // the gate and a read lock
	modeUpGate        // the gate alone: an Upgrade between its read and its write
	modeWrite         // the gate and the write lock
	modeGateAny       // the gate, being taken or given back
)

// NewUpgradableRWMutex returns a handle on the read-write lock name with
// an upgradable reader. It sends nothing; opts apply to its holds.
func NewUpgradableRWMutex(c *client.Client, name string, opts ...client.Option) *UpgradableRWMutex {
	if c == nil {
		return &UpgradableRWMutex{name: name, err: invalid("upgradable lock %q: nil *client.Client", name)}
	}
	o := holdOptions(opts)
	return &UpgradableRWMutex{name: name, gate: c.Mutex(name+"/upgrade", o...), rw: c.RWMutex(name, o...)}
}

func (u *UpgradableRWMutex) fail(op string, err error) error {
	return fmt.Errorf("recipe: upgradable lock %q %s: %w", u.name, op, err)
}

// expect checks the handle is in mode want (u.mu held).
func (u *UpgradableRWMutex) expect(op string, want umode) error {
	if u.err != nil {
		return u.err
	}
	if u.mode != want {
		return invalid("upgradable lock %q: %s in the wrong mode (one mode per handle: see UpgradableRWMutex)", u.name, op)
	}
	return nil
}

// RLock takes a plain read lock, shared with other readers and with the
// upgradable reader, waiting for a writer.
func (u *UpgradableRWMutex) RLock(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.expect("RLock", modeNone); err != nil {
		return err
	}
	if err := u.rw.RLock(ctx); err != nil {
		return u.fail("rlock", err)
	}
	u.mode = modeRead
	return nil
}

// RUnlock releases the plain read lock.
func (u *UpgradableRWMutex) RUnlock(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.expect("RUnlock", modeRead); err != nil {
		return err
	}
	u.mode = modeNone
	return u.rw.RUnlock(ctx)
}

// UpgradableRLock takes the upgradable read: the gate (waiting for another
// upgradable reader or writer to finish), then a read lock.
func (u *UpgradableRWMutex) UpgradableRLock(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.expect("UpgradableRLock", modeNone); err != nil {
		return err
	}
	if err := u.takeGate(ctx); err != nil {
		return u.fail("upgradable rlock", err)
	}
	if err := u.rw.RLock(ctx); err != nil {
		u.mode = modeGateAny
		u.giveGate(ctx)
		return u.fail("upgradable rlock", err)
	}
	u.mode = modeUpRead
	return nil
}

// Lock takes the write lock: the gate, then the write side.
func (u *UpgradableRWMutex) Lock(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.expect("Lock", modeNone); err != nil {
		return err
	}
	if err := u.takeGate(ctx); err != nil {
		return u.fail("lock", err)
	}
	if err := u.rw.Lock(ctx); err != nil {
		u.mode = modeGateAny
		u.giveGate(ctx)
		return u.fail("lock", err)
	}
	u.mode = modeWrite
	return nil
}

// Upgrade turns the upgradable read into the write lock: it releases the
// read and waits until the plain readers have left (waiting writers are
// served before new readers, so they cannot keep it out). No other writer
// can write in between. The write lock has a new, higher fencing token.
// If ctx ends or the cluster fails first, the handle holds the gate alone
// and Upgrade may be called again (or Unlock). An Upgrade whose gate was
// lost returns an error wrapping client.ErrLockLost with the write held.
func (u *UpgradableRWMutex) Upgrade(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.mode == modeUpRead {
		if err := u.rw.RUnlock(ctx); err != nil && !errors.Is(err, client.ErrLockLost) {
			return u.fail("upgrade", err)
		}
		u.mode = modeUpGate
	}
	if err := u.expect("Upgrade", modeUpGate); err != nil {
		return err
	}
	if err := u.rw.Lock(ctx); err != nil {
		return u.fail("upgrade", err)
	}
	u.mode = modeWrite
	if !u.gate.Held() || u.gate.Token() != u.token {
		return u.fail("upgrade", fmt.Errorf("the gate %q was lost: another writer may have written: %w", u.name+"/upgrade", client.ErrLockLost))
	}
	return nil
}

// Downgrade turns the write lock into the upgradable read, atomically (no
// writer in between; client.RWMutex.Downgrade), keeping the gate: the
// handle may Upgrade again. The read keeps the write's fencing token.
func (u *UpgradableRWMutex) Downgrade(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.expect("Downgrade", modeWrite); err != nil {
		return err
	}
	if err := u.rw.Downgrade(ctx); err != nil {
		return u.fail("downgrade", err)
	}
	u.mode = modeUpRead
	return nil
}

// Unlock ends the write lock or the upgradable read (whichever the handle
// holds) and gives the gate back.
func (u *UpgradableRWMutex) Unlock(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err != nil {
		return u.err
	}
	var err error
	switch u.mode {
	case modeWrite:
		err = u.rw.Unlock(ctx)
	case modeUpRead:
		err = u.rw.RUnlock(ctx)
	case modeUpGate:
	default:
		return u.fail("unlock", client.ErrNotHeld)
	}
	u.mode = modeGateAny
	u.giveGate(ctx)
	if err != nil {
		return u.fail("unlock", err)
	}
	return nil
}

// Token returns the fencing token of the read or write lock the handle
// holds, 0 if none.
func (u *UpgradableRWMutex) Token() uint64 {
	if u.err != nil {
		return 0
	}
	if t := u.rw.Writer().Token(); t != 0 {
		return t
	}
	return u.rw.Reader().Token()
}

// Held reports whether the handle holds every lock of its mode: the
// read lock (RLock), the gate and the read lock (UpgradableRLock,
// Downgrade), the gate and the write lock (Lock, Upgrade), or the gate
// alone (an Upgrade that did not finish). It reads the validity clock,
// so a loss shows at once; false when the handle holds nothing. Like
// every method, it waits for a call in progress on the handle.
func (u *UpgradableRWMutex) Held() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	holds := u.current()
	for _, m := range holds {
		if !m.Held() {
			return false
		}
	}
	return len(holds) > 0
}

// Lost returns a channel closed when one of the locks the handle holds
// in its mode at the call (see Held) is lost. It belongs to those holds:
// a hold that ends by its release (RUnlock, Unlock, or the read an
// Upgrade gives back) leaves it open, so call it again after Upgrade
// and Downgrade. If the handle holds nothing, the channel is closed.
func (u *UpgradableRWMutex) Lost() <-chan struct{} {
	u.mu.Lock()
	holds := u.current()
	// Each hold's channels, taken now: the holds current at the call.
	lost := make([]<-chan struct{}, len(holds))
	done := make([]<-chan struct{}, 2)
	for i, m := range holds {
		lost[i], done[i] = m.Lost(), m.Context().Done()
	}
	u.mu.Unlock()
	out := make(chan struct{})
	if len(holds) == 0 {
		close(out)
		return out
	}
	go lostOf(lost, done, out)
	return out
}

// current is the locks the handle's mode holds (u.mu held).
func (u *UpgradableRWMutex) current() []*client.Mutex {
	if u.err != nil {
		return nil
	}
	switch u.mode {
	case modeRead:
		return []*client.Mutex{u.rw.Reader()}
	case modeUpRead:
		return []*client.Mutex{u.gate, u.rw.Reader()}
	case modeUpGate:
		return []*client.Mutex{u.gate}
	case modeWrite:
		return []*client.Mutex{u.gate, u.rw.Writer()}
	}
	return nil
}

// lostOf closes out when a hold is lost (one of lost closed), and
// returns once one of the holds has ended (one of done closed), lost or
// released: done has room for two holds, a nil channel standing for
// none. A hold's Lost channel is closed before its Context ends, so a
// hold whose Context ended with its Lost channel open was released.
func lostOf(lost, done []<-chan struct{}, out chan<- struct{}) {
	select {
	case <-done[0]:
	case <-done[1]:
	}
	for _, ch := range lost {
		select {
		case <-ch:
			close(out)
			return
		default:
		}
	}
}

// takeGate takes the gate and remembers its token (u.mu held).
func (u *UpgradableRWMutex) takeGate(ctx context.Context) error {
	if err := u.gate.Lock(ctx); err != nil {
		return err
	}
	u.token = u.gate.Token()
	return nil
}

// giveGate gives the gate back and leaves the handle in modeNone (u.mu
// held). A release that fails leaves the gate to its TTL.
func (u *UpgradableRWMutex) giveGate(ctx context.Context) {
	_ = u.gate.Unlock(ctx)
	u.mode, u.token = modeNone, 0
}
