// This file is the run forms of lock, rlock, wlock, sem acquire and
// multi (KEY… -- CMD [ARG…]): take a hold, run CMD while it is held (the
// client renews it), signal CMD when the hold is lost, and release the
// hold once CMD has exited.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/paxlock/paxlock/client"
)

// Exit statuses of the run forms and elect, besides the command's own: a
// run form that held its hold until CMD exited returns CMD's exit code,
// or 128+N when signal N killed CMD.
const (
	// exitNotAcquired: -wait passed (with -wait 0: the key was taken)
	// before the hold was granted; CMD did not run.
	exitNotAcquired = 124
	// exitLost: the hold (elect: the leadership) was lost before CMD
	// exited; CMD was sent SIGTERM, and SIGKILL after -kill-after.
	exitLost = 125
	// exitCannotRun: CMD was found but could not be started.
	exitCannotRun = 126
	// exitNotFound: CMD was not found.
	exitNotFound = 127
)

// exitStatus is an error that ends paxlockctl with its code, once what
// there was to say was printed.
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitWith is nil for exit status 0, else the exitStatus of code.
func exitWith(code int) error {
	if code == 0 {
		return nil
	}
	return exitStatus{code}
}

// cmdWaitDelay bounds how long paxlockctl waits, once CMD has exited, for
// the processes CMD left behind to close the output pipes it copies (only
// when its standard streams are not files, as in tests).
const cmdWaitDelay = 2 * time.Second

// runHold runs the run form of lock, rlock, wlock, sem or multi: args
// are the arguments before "--", o.argv CMD and its arguments. Its
// events go to standard error, so that standard output is CMD's alone.
func runHold(ctx context.Context, o *options, _ printer, name string, args []string) error {
	if o.argv == nil {
		return fmt.Errorf("%w: %s runs a command under the hold: add -- CMD [ARG…]", errUsage, name)
	}
	if len(o.argv) == 0 {
		return fmt.Errorf("%w: %s: no command after --", errUsage, name)
	}
	if err := checkHoldArgs(name, args, o.limit, o.limitGiven); err != nil {
		return err
	}
	if err := checkRecipeHold(o, name, args); err != nil {
		return err
	}
	if o.ttl < 0 || o.wait < 0 || o.killAfter < 0 || o.lockDelay < 0 || o.maxHold < 0 {
		return fmt.Errorf("%w: -ttl, -wait, -kill-after, -lock-delay and -max-hold cannot be negative", errUsage)
	}
	if o.lockDelay > client.MaxLockDelay {
		return fmt.Errorf("%w: -lock-delay %v: at most %v", errUsage, o.lockDelay, client.MaxLockDelay)
	}
	if err := checkMaxHold(o); err != nil {
		return err
	}
	if err := checkWeightValue(o.weight, o.value); err != nil {
		return err
	}
	c, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // gives back whatever is still held; the run's result is what it reports
	h := recipeHolder(c, o, name, args[0], holdOptions(o))
	if h == nil {
		if h, err = newHolder(c, name, args, o.limit, holdOptions(o)); err != nil {
			return err
		}
	}
	r := &runner{o: o, h: h, p: printer{w: o.stderr, json: o.outputJSON}, base: holdEvent{Kind: name}}
	if err := r.acquire(ctx); err != nil {
		return err
	}
	return r.runCmd(ctx)
}

// runner runs one command under one hold.
type runner struct {
	o    *options
	h    holder
	p    printer
	base holdEvent // kind, key(s), token(s): what every event repeats
	sent bool      // a signal was forwarded to CMD
}

// emit prints e after the hold's fields.
func (r *runner) emit(e holdEvent) {
	ev := r.base
	ev.Event, ev.WaitedMs, ev.Signal, ev.Reason, ev.ExitCode, ev.Holder = e.Event, e.WaitedMs, e.Signal, e.Reason, e.ExitCode, e.Holder
	if ev.Token == 0 {
		ev.Token = e.Token
	}
	if err := r.p.emit(ev); err != nil {
		fmt.Fprintln(r.o.stderr, "paxlockctl:", err)
	}
}

// acquire takes the hold: waiting until granted or ctx ends without
// -wait, trying once with -wait 0, waiting up to -wait otherwise. Not
// granted within -wait, it reports and returns exitNotAcquired.
func (r *runner) acquire(ctx context.Context) error {
	start := time.Now()
	var err error
	switch {
	case !r.o.waitGiven:
		err = r.h.take(ctx, true)
	case r.o.wait == 0:
		err = r.h.take(ctx, false)
	default:
		wctx, cancel := context.WithTimeout(ctx, r.o.wait)
		err = r.h.take(wctx, true)
		if err != nil && ctx.Err() == nil && (wctx.Err() != nil || errors.Is(err, client.ErrTimeout)) {
			err = fmt.Errorf("not granted within -wait %v: %w", r.o.wait, client.ErrLocked)
		}
		cancel()
	}
	waited := time.Since(start).Milliseconds()
	var le *client.LockedError
	switch {
	case err == nil:
	case r.o.waitGiven && errors.Is(err, client.ErrLocked):
		ev := holdEvent{Event: "not_acquired", WaitedMs: waited}
		if errors.As(err, &le) && !le.Holder.IsZero() {
			ev.Holder, ev.Token = le.Holder.String(), le.Token
		}
		r.h.describe(&r.base)
		r.emit(ev)
		return exitStatus{exitNotAcquired}
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted while waiting for the hold: %w", err)
	default:
		return err
	}
	r.h.describe(&r.base)
	r.emit(holdEvent{Event: "locked", WaitedMs: waited})
	return nil
}

// env is CMD's environment: paxlockctl's, less any PAXLOCK_* variable
// that describes a hold, plus this hold's, and PAXLOCK_HELD with this
// hold's keys added.
func (r *runner) env() []string {
	ours := []string{envKey, envToken, envKeys, envTokens, envPermits, envNamespace, envHeld, envUpgrade, envSem}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(ours, name) {
			env = append(env, kv)
		}
	}
	return append(append(env, envNamespace+"="+r.o.ns, heldEnv(r.o.ns, r.base)), r.h.env()...)
}

// runCmd starts CMD, supervises it until it exits, and releases the hold.
// It returns CMD's exit status, or exitLost when the hold was lost first.
func (r *runner) runCmd(ctx context.Context) error {
	if ctx.Err() != nil {
		r.release()
		return errors.New("interrupted before the command started")
	}
	cmd := exec.Command(r.o.argv[0], r.o.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r.o.stdin, r.o.stdout, r.o.stderr
	cmd.Env = r.env()
	cmd.WaitDelay = cmdWaitDelay
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		r.release()
		fmt.Fprintln(r.o.stderr, "paxlockctl:", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitStatus{exitNotFound}
		}
		return exitStatus{exitCannotRun}
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // CMD's status is read from cmd.ProcessState
		close(exited)
	}()
	lost := r.supervise(ctx, cmd, exited)
	code, sig := exitCodeOf(cmd.ProcessState)
	r.emit(holdEvent{Event: "exited", ExitCode: &code, Signal: sig})
	if !lost && !r.h.held() {
		// Lost as CMD exited: whether CMD's last acts were covered is
		// unknown, so it counts as a loss.
		lost = true
		r.emit(holdEvent{Event: "lost"})
	}
	if lost {
		_ = r.releaseCtx() // ends the lost hold's count; it is gone either way
		return exitStatus{exitLost}
	}
	r.release()
	return exitWith(code)
}

// supervise waits for CMD to exit (exited closes once cmd.Wait has
// returned). When the hold is lost it sends CMD SIGTERM, and SIGKILL
// -kill-after later; it forwards the signals paxlockctl receives (SIGTERM
// when ctx ends without one). It reports whether the hold was lost.
func (r *runner) supervise(ctx context.Context, cmd *exec.Cmd, exited <-chan struct{}) (lost bool) {
	lostCh, ctxDone := r.h.lost(), ctx.Done()
	killT := time.NewTimer(time.Hour)
	killT.Stop()
	defer killT.Stop()
	for {
		select {
		case <-exited:
			return lost
		case <-lostCh:
			lostCh, lost = nil, true
			r.emit(holdEvent{Event: "lost"})
			r.signal(cmd, syscall.SIGTERM, "lost")
			killT.Reset(r.o.killAfter)
		case <-killT.C:
			r.signal(cmd, syscall.SIGKILL, "kill_after")
		case s := <-r.o.signals:
			r.sent = true
			r.signal(cmd, s, "forwarded")
		case <-ctxDone:
			// The signal that ended ctx is forwarded once: it is either
			// forwarded already or queued in signals (relaySignals queues
			// it before it ends ctx); without one, CMD gets SIGTERM.
			ctxDone = nil
			if !r.sent {
				r.sent = true
				select {
				case s := <-r.o.signals:
					r.signal(cmd, s, "forwarded")
				default:
					r.signal(cmd, syscall.SIGTERM, "interrupted")
				}
			}
		}
	}
}

// signal sends sig to CMD's process group and reports it.
func (r *runner) signal(cmd *exec.Cmd, sig os.Signal, reason string) {
	r.emit(holdEvent{Event: "signal", Signal: signalName(sig), Reason: reason})
	_ = signalGroup(cmd, sig) // a group already gone has nothing left to stop
}

// releaseCtx gives the hold back within -timeout, even after a signal
// ended the commands' context.
func (r *runner) releaseCtx() error {
	ctx, cancel := context.WithTimeout(context.Background(), r.o.timeout)
	defer cancel()
	return r.h.release(ctx)
}

// release gives the hold back and reports it; a release that fails is
// reported, the hold then ends when its TTL runs out.
func (r *runner) release() {
	if err := r.releaseCtx(); err != nil {
		fmt.Fprintf(r.o.stderr, "paxlockctl: release: %v (the hold ends when its TTL runs out)\n", err)
		return
	}
	r.emit(holdEvent{Event: "released"})
}

// holdEvent is one line of a run form's output, on standard error: locked
// (or not_acquired), then signal and lost as they happen, exited, and
// released.
type holdEvent struct {
	// Event is locked, not_acquired, lost, signal, exited or released.
	Event string `json:"event"`
	// Kind is the command: lock, rlock, wlock, sem or multi.
	Kind string `json:"kind"`
	// Key is the key (sem: the semaphore's name); multi has Keys, as
	// given, and their Tokens, in the same order.
	Key    string   `json:"key,omitempty"`
	Keys   []string `json:"keys,omitempty"`
	Token  uint64   `json:"token,omitempty"`
	Tokens []uint64 `json:"tokens,omitempty"`
	// Permits and Limit are sem's permits held and the semaphore's total.
	Permits int `json:"permits,omitempty"`
	Limit   int `json:"limit,omitempty"`
	// WaitedMs is how long the acquire took (locked, not_acquired).
	WaitedMs int64 `json:"waited_ms,omitempty"`
	// Holder is who holds the key (not_acquired with -wait 0, when
	// known); Token is then the holder's.
	Holder string `json:"holder,omitempty"`
	// Signal is the signal sent to CMD (signal) or that killed it
	// (exited), as SIGTERM.
	Signal string `json:"signal,omitempty"`
	// Reason is why a signal was sent: lost (SIGTERM), kill_after
	// (SIGKILL), forwarded (a signal paxlockctl received), interrupted.
	Reason string `json:"reason,omitempty"`
	// ExitCode is CMD's exit status (exited): its exit code, or 128+N
	// when signal N killed it.
	ExitCode *int `json:"exit_code,omitempty"`
}

// table prints what a person running a script wants to know: nothing
// while all goes well, a line on standard error when it does not.
func (e holdEvent) table(w io.Writer) error {
	what := e.Key
	if len(e.Keys) > 0 {
		what = strings.Join(e.Keys, ", ")
	}
	var err error
	switch e.Event {
	case "not_acquired":
		held := ""
		if e.Holder != "" {
			held = fmt.Sprintf(" (held by %s, token %d)", e.Holder, e.Token)
		}
		_, err = fmt.Fprintf(w, "paxlockctl: %s %s: not acquired after %s%s\n", e.Kind, what, time.Duration(e.WaitedMs)*time.Millisecond, held)
	case "lost":
		_, err = fmt.Fprintf(w, "paxlockctl: %s %s: the hold was lost while the command ran\n", e.Kind, what)
	case "signal":
		_, err = fmt.Fprintf(w, "paxlockctl: %s %s: sent %s to the command (%s)\n", e.Kind, what, e.Signal, e.Reason)
	}
	return err
}

// dial connects a client with the command line's settings, within
// -timeout.
func (o *options) dial(ctx context.Context) (*client.Client, error) {
	cfg, err := o.clientConfig()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return client.New(ctx, cfg)
}
