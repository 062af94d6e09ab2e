// This file is latch and barrier: the count-down latch, barrier and
// double barrier of package client/recipe on the command line.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
)

// recipeEvent is one line of latch's and barrier's output.
type recipeEvent struct {
	// Event is count, counted_down, open, not_open (-wait passed),
	// held, not_held (held by another), released, lost or passed.
	Event string `json:"event"`
	// Kind is latch, barrier or double (barrier enter).
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Left is the CountDowns a latch still needs (count, counted_down).
	Left *int `json:"left,omitempty"`
	// WaitedMs is how long the wait took (open, not_open, passed).
	WaitedMs int64  `json:"waited_ms,omitempty"`
	Holder   string `json:"holder,omitempty"`
}

func (e recipeEvent) table(w io.Writer) error {
	var err error
	switch {
	case e.Left != nil:
		_, err = fmt.Fprintf(w, "%s %s: %s, %d left\n", e.Kind, e.Name, e.Event, *e.Left)
	case e.Holder != "":
		_, err = fmt.Fprintf(w, "%s %s: %s by %s\n", e.Kind, e.Name, e.Event, e.Holder)
	case e.WaitedMs > 0:
		_, err = fmt.Fprintf(w, "%s %s: %s after %s\n", e.Kind, e.Name, e.Event, time.Duration(e.WaitedMs)*time.Millisecond)
	default:
		_, err = fmt.Fprintf(w, "%s %s: %s\n", e.Kind, e.Name, e.Event)
	}
	return err
}

// recipeOptions are the options of a latch's or barrier's holds: -ttl
// and -value.
func recipeOptions(o *options) []client.Option {
	var opts []client.Option
	if o.ttl > 0 {
		opts = append(opts, client.TTL(o.ttl))
	}
	if o.value != "" {
		opts = append(opts, client.Value(o.value))
	}
	return opts
}

// checkRecipeFlags checks -ttl, -wait, -value, and -limit when need.
func checkRecipeFlags(o *options, cmd string, needLimit bool) error {
	if o.ttl < 0 || o.wait < 0 || (o.waitGiven && o.wait == 0) {
		return fmt.Errorf("%w: %s: -ttl cannot be negative, and -wait must be positive", errUsage, cmd)
	}
	if needLimit && (!o.limitGiven || o.limit < 1) {
		return fmt.Errorf("%w: %s: -limit N, the count (at least 1), is required", errUsage, cmd)
	}
	return checkWeightValue(0, o.value)
}

// waitCtx bounds a wait by -wait when given.
func waitCtx(ctx context.Context, o *options) (context.Context, context.CancelFunc) {
	if o.waitGiven {
		return context.WithTimeout(ctx, o.wait)
	}
	return ctx, func() {}
}

// runLatch runs latch count|wait|countdown NAME -limit N.
func runLatch(ctx context.Context, o *options, p printer, _ string, args []string) error {
	if len(args) != 2 || (args[0] != "count" && args[0] != "wait" && args[0] != "countdown") {
		return fmt.Errorf("%w: want latch count|wait|countdown NAME -limit N", errUsage)
	}
	if err := checkRecipeFlags(o, "latch", true); err != nil {
		return err
	}
	c, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // gives back a CountDown left; the command's result is what it reports
	name := args[1]
	l := recipe.NewLatch(c, name, o.limit, recipeOptions(o)...)
	switch args[0] {
	case "count":
		n, err := l.Count(ctx)
		if err != nil {
			return err
		}
		return p.emit(recipeEvent{Event: "count", Kind: "latch", Name: name, Left: &n})
	case "wait":
		return latchWait(ctx, o, p, l, l.Wait)
	}
	if err := l.CountDown(ctx); err != nil {
		return err
	}
	n, err := l.Count(ctx)
	if err != nil {
		return err
	}
	if err := p.emit(recipeEvent{Event: "counted_down", Kind: "latch", Name: name, Left: &n}); err != nil {
		return err
	}
	return latchWait(ctx, o, p, l, l.Close)
}

// latchWait runs wait (Wait, or a counter's Close) within -wait and
// reports open, or not_open with exit status exitNotAcquired.
func latchWait(ctx context.Context, o *options, p printer, l *recipe.Latch, wait func(context.Context) error) error {
	start := time.Now()
	wctx, cancel := waitCtx(ctx, o)
	defer cancel()
	err := wait(wctx)
	ms := time.Since(start).Milliseconds()
	switch {
	case err == nil:
		return p.emit(recipeEvent{Event: "open", Kind: "latch", Name: l.Name(), WaitedMs: ms})
	case ctx.Err() == nil && wctx.Err() != nil:
		if err := p.emit(recipeEvent{Event: "not_open", Kind: "latch", Name: l.Name(), WaitedMs: ms}); err != nil {
			return err
		}
		return exitStatus{exitNotAcquired}
	}
	return err
}

// runBarrier runs barrier hold NAME [-- CMD], barrier wait NAME and
// barrier enter NAME -limit N -- CMD.
func runBarrier(ctx context.Context, o *options, p printer, _ string, args []string) error {
	form := "barrier hold NAME [-- CMD [ARG…]], barrier wait NAME or barrier enter NAME -limit N -- CMD [ARG…]"
	if len(args) != 2 || (args[0] != "hold" && args[0] != "wait" && args[0] != "enter") {
		return fmt.Errorf("%w: want %s", errUsage, form)
	}
	switch {
	case args[0] == "enter" && len(o.argv) == 0:
		return fmt.Errorf("%w: barrier enter runs a command between entering and leaving: add -- CMD [ARG…]", errUsage)
	case args[0] == "wait" && o.argv != nil:
		return fmt.Errorf("%w: barrier wait runs no command", errUsage)
	case o.argv != nil && len(o.argv) == 0:
		return fmt.Errorf("%w: barrier: no command after --", errUsage)
	}
	if err := checkRecipeFlags(o, "barrier "+args[0], args[0] == "enter"); err != nil {
		return err
	}
	c, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // gives back a hold left; the command's result is what it reports
	name := args[1]
	switch {
	case args[0] == "wait":
		return barrierWait(ctx, o, p, recipe.NewBarrier(c, name))
	case args[0] == "enter":
		h := &doubleHold{b: recipe.NewDoubleBarrier(c, name, o.limit, recipeOptions(o)...), name: name, n: o.limit}
		return runRecipeCmd(ctx, o, "barrier", h)
	case o.argv != nil:
		return runRecipeCmd(ctx, o, "barrier", &barrierHold{b: recipe.NewBarrier(c, name, recipeOptions(o)...), name: name})
	}
	return barrierHoldCmd(ctx, o, p, recipe.NewBarrier(c, name, recipeOptions(o)...), name)
}

// barrierWait waits within -wait for the barrier to be released.
func barrierWait(ctx context.Context, o *options, p printer, b *recipe.Barrier) error {
	start := time.Now()
	wctx, cancel := waitCtx(ctx, o)
	defer cancel()
	err := b.Wait(wctx)
	ms := time.Since(start).Milliseconds()
	switch {
	case err == nil:
		return p.emit(recipeEvent{Event: "passed", Kind: "barrier", Name: b.Name(), WaitedMs: ms})
	case ctx.Err() == nil && wctx.Err() != nil:
		if err := p.emit(recipeEvent{Event: "not_open", Kind: "barrier", Name: b.Name(), WaitedMs: ms}); err != nil {
			return err
		}
		return exitStatus{exitNotAcquired}
	}
	return err
}

// barrierHoldCmd holds the barrier until SIGINT or SIGTERM (then releases
// it, exit status 0) or its loss (exit status exitLost); held by another,
// it exits exitNotAcquired.
func barrierHoldCmd(ctx context.Context, o *options, p printer, b *recipe.Barrier, name string) error {
	if err := b.Hold(ctx); err != nil {
		var le *client.LockedError
		if errors.As(err, &le) {
			if err := p.emit(recipeEvent{Event: "not_held", Kind: "barrier", Name: name, Holder: le.Holder.String()}); err != nil {
				return err
			}
			return exitStatus{exitNotAcquired}
		}
		return err
	}
	if err := p.emit(recipeEvent{Event: "held", Kind: "barrier", Name: name}); err != nil {
		return err
	}
	select {
	case <-b.Lost():
		if err := p.emit(recipeEvent{Event: "lost", Kind: "barrier", Name: name}); err != nil {
			return err
		}
		return exitStatus{exitLost}
	case <-ctx.Done():
	}
	rctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := b.Release(rctx); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return p.emit(recipeEvent{Event: "released", Kind: "barrier", Name: name})
}

// runRecipeCmd runs o.argv under h, as the run forms do.
func runRecipeCmd(ctx context.Context, o *options, kind string, h holder) error {
	r := &runner{o: o, h: h, p: printer{w: o.stderr, json: o.outputJSON}, base: holdEvent{Kind: kind}}
	if err := r.acquire(ctx); err != nil {
		return err
	}
	return r.runCmd(ctx)
}

// barrierHold is barrier hold's run-form hold: the barrier, set while CMD
// runs. It never waits: a barrier held by another is ErrLocked.
type barrierHold struct {
	b    *recipe.Barrier
	name string
}

func (h *barrierHold) take(ctx context.Context, _ bool) error { return h.b.Hold(ctx) }
func (h *barrierHold) held() bool {
	select {
	case <-h.b.Lost():
		return false
	default:
		return true
	}
}
func (h *barrierHold) lost() <-chan struct{}             { return h.b.Lost() }
func (h *barrierHold) release(ctx context.Context) error { return h.b.Release(ctx) }
func (h *barrierHold) describe(e *holdEvent)             { e.Key = h.name }
func (h *barrierHold) env() []string                     { return []string{envKey + "=" + h.name} }

// doubleHold is barrier enter's hold: inside the double barrier, from
// Enter (all n in) to Leave (all n out). Its loss does not stop CMD: the
// others go on either way.
type doubleHold struct {
	b    *recipe.DoubleBarrier
	name string
	n    int
}

func (h *doubleHold) take(ctx context.Context, _ bool) error { return h.b.Enter(ctx) }
func (h *doubleHold) held() bool                             { return true }
func (h *doubleHold) lost() <-chan struct{}                  { return nil }
func (h *doubleHold) release(ctx context.Context) error      { return h.b.Leave(ctx) }
func (h *doubleHold) describe(e *holdEvent)                  { e.Key, e.Limit = h.name, h.n }
func (h *doubleHold) env() []string {
	return []string{envKey + "=" + h.name, envPermits + "=" + strconv.Itoa(h.n)}
}
