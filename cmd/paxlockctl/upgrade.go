// This file is the upgradable read lock on the command line: rlock
// -upgradable KEY -- CMD runs CMD under client/recipe's upgradable read
// and serves, on a Unix socket named in CMD's environment, the upgrade
// and downgrade that CMD asks for by running paxlockctl upgrade and
// paxlockctl downgrade.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
)

// envUpgrade names the socket through which CMD asks its rlock
// -upgradable for the upgrade (paxlockctl upgrade) or the downgrade.
const envUpgrade = "PAXLOCK_UPGRADE"

// upgradeHold is rlock -upgradable's hold: the upgradable read of KEY,
// which CMD may upgrade to the write lock and downgrade again through
// the socket it serves while CMD runs.
type upgradeHold struct {
	u    *recipe.UpgradableRWMutex
	name string
	// write: wlock -upgradable, the writer that takes the gate (Lock),
	// with no socket.
	write bool

	sock *holdSocket // nil until take, and for the write side
	out  chan struct{}
	once sync.Once
	stop chan struct{} // closed by release: the watcher and server end
	// kick tells the loss watcher that the handle's mode changed: the
	// holds to watch are new.
	kick chan struct{}
}

func newUpgradeHold(c *client.Client, key string, write bool, opts []client.Option) *upgradeHold {
	return &upgradeHold{u: recipe.NewUpgradableRWMutex(c, key, opts...), name: key, write: write,
		out: make(chan struct{}), stop: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// take takes the upgradable read, then opens the socket, or the write
// lock behind the gate (it always waits: the recipe has no try;
// runHold refuses -wait 0).
func (h *upgradeHold) take(ctx context.Context, _ bool) error {
	if h.write {
		if err := h.u.Lock(ctx); err != nil {
			return err
		}
		go h.watch()
		return nil
	}
	if err := h.u.UpgradableRLock(ctx); err != nil {
		return err
	}
	sock, err := openHoldSocket("upgrade", h.perform)
	if err != nil {
		_ = h.release(ctx)
		return fmt.Errorf("rlock -upgradable: the upgrade socket: %w", err)
	}
	h.sock = sock
	go h.watch()
	return nil
}

func (h *upgradeHold) held() bool            { return h.u.Held() }
func (h *upgradeHold) lost() <-chan struct{} { return h.out }

func (h *upgradeHold) markLost() { h.once.Do(func() { close(h.out) }) }

// watch closes out when a hold of the handle's current mode is lost,
// following the mode through upgrades and downgrades.
func (h *upgradeHold) watch() {
	for {
		select {
		case <-h.u.Lost():
			h.markLost()
			return
		case <-h.kick:
		case <-h.stop:
			return
		}
	}
}

// release closes the socket and gives every lock back.
func (h *upgradeHold) release(ctx context.Context) error {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	if h.sock != nil {
		h.sock.close()
	}
	return h.u.Unlock(ctx)
}

func (h *upgradeHold) describe(e *holdEvent) { e.Key, e.Token = h.name, h.u.Token() }

func (h *upgradeHold) env() []string {
	env := []string{envKey + "=" + h.name, envToken + "=" + strconv.FormatUint(h.u.Token(), 10)}
	if h.sock != nil {
		env = append(env, envUpgrade+"="+h.sock.addr())
	}
	return env
}

// perform runs one upgrade or downgrade and says how it went.
func (h *upgradeHold) perform(ctx context.Context, req holdRequest) holdReply {
	var err error
	switch req.Op {
	case "upgrade":
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if req.WaitMs > 0 {
			wctx, cancel = context.WithTimeout(ctx, time.Duration(req.WaitMs)*time.Millisecond)
		}
		err = h.u.Upgrade(wctx)
		if err != nil && ctx.Err() == nil && (wctx.Err() != nil || errors.Is(err, client.ErrTimeout)) {
			cancel()
			h.kickWatch()
			return holdReply{Exit: exitNotAcquired, Error: fmt.Sprintf("not upgraded within -wait %v: %v", time.Duration(req.WaitMs)*time.Millisecond, err)}
		}
		cancel()
	case "downgrade":
		err = h.u.Downgrade(ctx)
	default:
		return holdReply{Exit: 2, Error: fmt.Sprintf("unknown request %q", req.Op)}
	}
	h.kickWatch()
	switch {
	case errors.Is(err, client.ErrLockLost):
		h.markLost()
		return holdReply{Exit: exitLost, Error: err.Error()}
	case err != nil:
		return holdReply{Exit: 1, Error: err.Error()}
	}
	return holdReply{Token: h.u.Token()}
}

func (h *upgradeHold) kickWatch() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// upgradeEvent is paxlockctl upgrade's and downgrade's output.
type upgradeEvent struct {
	// Event is upgraded or downgraded.
	Event string `json:"event"`
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

// table prints the token alone, for tok=$(paxlockctl upgrade).
func (e upgradeEvent) table(w io.Writer) error {
	_, err := fmt.Fprintln(w, e.Token)
	return err
}

// runUpgrade is upgrade and downgrade: a request to the rlock
// -upgradable whose command runs this paxlockctl.
func runUpgrade(ctx context.Context, o *options, p printer, cmd string, args []string) error {
	if err := wantArgs(args, 0, 0, cmd); err != nil {
		return err
	}
	if o.wait < 0 || cmd == "downgrade" && o.waitGiven {
		return fmt.Errorf("%w: %s: -wait must be positive, and is upgrade's only", errUsage, cmd)
	}
	rep, err := askHold(ctx, envUpgrade, cmd, "rlock -upgradable KEY", holdRequest{Op: cmd, WaitMs: o.wait.Milliseconds()})
	if err != nil {
		return err
	}
	if err := replyErr(o, cmd, rep); err != nil {
		return err
	}
	return p.emit(upgradeEvent{Event: cmd + "d", Key: os.Getenv(envKey), Token: rep.Token})
}
