// This file is the upgradable read lock on the command line: rlock
// -upgradable KEY -- CMD runs CMD under client/recipe's upgradable read
// and serves, on a Unix socket named in CMD's environment, the upgrade
// and downgrade that CMD asks for by running paxlockctl upgrade and
// paxlockctl downgrade.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
)

// envUpgrade names the socket through which CMD asks its rlock
// -upgradable for the upgrade (paxlockctl upgrade) or the downgrade.
const envUpgrade = "PAXLOCK_UPGRADE"

// upgradeRequest is what paxlockctl upgrade or downgrade sends, one JSON
// line.
type upgradeRequest struct {
	// Op is upgrade or downgrade.
	Op string `json:"op"`
	// WaitMs bounds the upgrade's wait (0: until the rlock ends).
	WaitMs int64 `json:"wait_ms,omitempty"`
}

// upgradeReply is the rlock's answer, one JSON line.
type upgradeReply struct {
	// Token is the fencing token of the lock now held (upgrade: the
	// write's, higher than the read's; downgrade: kept).
	Token uint64 `json:"token,omitempty"`
	// Exit is the exit status paxlockctl upgrade ends with: 0, 1 (the
	// cluster failed: ask again), 124 (not upgraded within -wait), 125
	// (the gate was lost: CMD is being stopped).
	Exit  int    `json:"exit"`
	Error string `json:"error,omitempty"`
}

// maxUpgradeLine bounds a request or reply line.
const maxUpgradeLine = 4096

// upgradeHold is rlock -upgradable's hold: the upgradable read of KEY,
// which CMD may upgrade to the write lock and downgrade again through
// the socket it serves while CMD runs.
type upgradeHold struct {
	u    *recipe.UpgradableRWMutex
	name string
	// write: wlock -upgradable, the writer that takes the gate (Lock),
	// with no socket.
	write bool

	dir  string       // the socket's private directory
	ln   net.Listener // nil until take
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
	dir, err := os.MkdirTemp("", "paxlockctl-upgrade-")
	if err == nil {
		h.dir = dir
		h.ln, err = net.Listen("unix", filepath.Join(dir, "s"))
	}
	if err != nil {
		_ = h.release(ctx)
		return fmt.Errorf("rlock -upgradable: the upgrade socket: %w", err)
	}
	// The requests outlive take's context, which -wait bounds: each
	// ends with its asker's connection or with the hold (release).
	go h.serve(context.Background())
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
	if h.ln != nil {
		_ = h.ln.Close()
	}
	if h.dir != "" {
		_ = os.RemoveAll(h.dir)
	}
	return h.u.Unlock(ctx)
}

func (h *upgradeHold) describe(e *holdEvent) { e.Key, e.Token = h.name, h.u.Token() }

func (h *upgradeHold) env() []string {
	env := []string{envKey + "=" + h.name, envToken + "=" + strconv.FormatUint(h.u.Token(), 10)}
	if h.ln != nil {
		env = append(env, envUpgrade+"="+h.ln.Addr().String())
	}
	return env
}

// serve answers CMD's requests, one connection at a time, until release
// closes the listener.
func (h *upgradeHold) serve(ctx context.Context) {
	for {
		conn, err := h.ln.Accept()
		if err != nil {
			return
		}
		h.answer(ctx, conn)
	}
}

// answer reads one request from conn and performs it. The request is
// abandoned when the asking paxlockctl goes away (its connection ends)
// or the rlock ends.
func (h *upgradeHold) answer(ctx context.Context, conn net.Conn) {
	defer func() { _ = conn.Close() }()
	br := bufio.NewReader(io.LimitReader(conn, maxUpgradeLine))
	line, err := br.ReadBytes('\n')
	var req upgradeRequest
	if err != nil || json.Unmarshal(line, &req) != nil {
		return
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = br.ReadByte() // the asker sends nothing more: its end ends the request
		cancel()
	}()
	go func() {
		select {
		case <-h.stop:
			cancel()
		case <-rctx.Done():
		}
	}()
	rep := h.perform(rctx, req)
	b, _ := json.Marshal(rep) // a plain struct: cannot fail
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write(append(b, '\n'))
}

// perform runs one upgrade or downgrade and says how it went.
func (h *upgradeHold) perform(ctx context.Context, req upgradeRequest) upgradeReply {
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
			return upgradeReply{Exit: exitNotAcquired, Error: fmt.Sprintf("not upgraded within -wait %v: %v", time.Duration(req.WaitMs)*time.Millisecond, err)}
		}
		cancel()
	case "downgrade":
		err = h.u.Downgrade(ctx)
	default:
		return upgradeReply{Exit: 2, Error: fmt.Sprintf("unknown request %q", req.Op)}
	}
	h.kickWatch()
	switch {
	case errors.Is(err, client.ErrLockLost):
		h.markLost()
		return upgradeReply{Exit: exitLost, Error: err.Error()}
	case err != nil:
		return upgradeReply{Exit: 1, Error: err.Error()}
	}
	return upgradeReply{Token: h.u.Token()}
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
	sock := os.Getenv(envUpgrade)
	if sock == "" {
		return fmt.Errorf("%w: %s runs inside paxlockctl rlock -upgradable KEY -- CMD (%s is not set)", errUsage, cmd, envUpgrade)
	}
	if o.wait < 0 || cmd == "downgrade" && o.waitGiven {
		return fmt.Errorf("%w: %s: -wait must be positive, and is upgrade's only", errUsage, cmd)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("%s: the rlock -upgradable is gone: %w", cmd, err)
	}
	defer func() { _ = conn.Close() }()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() }) // interrupted: the rlock abandons the request
	defer stop()
	b, _ := json.Marshal(upgradeRequest{Op: cmd, WaitMs: o.wait.Milliseconds()}) // a plain struct: cannot fail
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	line, err := bufio.NewReader(io.LimitReader(conn, maxUpgradeLine)).ReadBytes('\n')
	var rep upgradeReply
	if err == nil {
		err = json.Unmarshal(line, &rep)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: interrupted: %w", cmd, ctx.Err())
	case err != nil:
		return fmt.Errorf("%s: no answer from the rlock -upgradable: %w", cmd, err)
	case rep.Exit == 1:
		return fmt.Errorf("%s: %s", cmd, rep.Error)
	case rep.Exit != 0:
		fmt.Fprintf(o.stderr, "paxlockctl: %s: %s\n", cmd, rep.Error)
		return exitStatus{rep.Exit}
	}
	return p.emit(upgradeEvent{Event: cmd + "d", Key: os.Getenv(envKey), Token: rep.Token})
}
