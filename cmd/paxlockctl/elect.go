// This file is elect: campaign in a leader election and lead until
// interrupted (elect NAME VALUE), or print an election's leaders as they
// change (elect observe NAME).

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/paxlock/paxlock/client"
)

// runElect runs elect NAME VALUE, elect campaign NAME VALUE (the same,
// for an election named observe or campaign) or elect observe NAME.
func runElect(ctx context.Context, o *options, p printer, _ string, args []string) error {
	var observe bool
	var name, value string
	switch {
	case len(args) == 2 && args[0] == "observe":
		observe, name = true, args[1]
	case len(args) == 3 && args[0] == "campaign":
		name, value = args[1], args[2]
	case len(args) == 2:
		name, value = args[0], args[1]
	default:
		return fmt.Errorf("%w: want elect NAME VALUE or elect observe NAME", errUsage)
	}
	if o.ttl < 0 || (o.waitGiven && o.wait <= 0) {
		return fmt.Errorf("%w: elect: -ttl cannot be negative, and -wait must be positive", errUsage)
	}
	c, err := o.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // gives up leadership if still held; the command's result is what it reports
	if observe {
		return observeCmd(ctx, p, c, name)
	}
	return campaignCmd(ctx, o, p, c, name, value)
}

// campaignCmd campaigns in election name with value, prints the win, and
// leads until ctx ends (SIGINT, SIGTERM: it resigns, exit status 0) or
// leadership is lost (exit status exitLost). With -wait it gives up
// campaigning after that long (exit status exitNotAcquired); interrupted
// before it wins, it ends with exit status 0.
func campaignCmd(ctx context.Context, o *options, p printer, c *client.Client, name, value string) error {
	opts := []client.Option{}
	if o.ttl > 0 {
		opts = append(opts, client.TTL(o.ttl))
	}
	e := c.Election(name, opts...)
	start := time.Now()
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if o.waitGiven {
		wctx, cancel = context.WithTimeout(ctx, o.wait)
	}
	err := e.Campaign(wctx, value)
	timedOut := wctx.Err() != nil || errors.Is(err, client.ErrTimeout)
	cancel()
	waited := time.Since(start).Milliseconds()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return nil // interrupted while a candidate: it left the queue
	case o.waitGiven && timedOut:
		if err := p.emit(electEvent{Event: "not_elected", Name: name, Value: value, WaitedMs: waited}); err != nil {
			return err
		}
		return exitStatus{exitNotAcquired}
	default:
		return err
	}
	token := e.Token()
	if err := p.emit(electEvent{Event: "elected", Name: name, Value: value, Token: token, WaitedMs: waited}); err != nil {
		_ = e.Resign(context.Background()) // the write error is what we report
		return err
	}
	select {
	case <-e.Lost():
		if err := p.emit(electEvent{Event: "lost", Name: name, Value: value, Token: token}); err != nil {
			return err
		}
		return exitStatus{exitLost}
	case <-ctx.Done():
	}
	resignCtx, cancelResign := context.WithTimeout(context.Background(), o.timeout)
	defer cancelResign()
	if err := e.Resign(resignCtx); err != nil {
		return fmt.Errorf("resign: %w", err)
	}
	return p.emit(electEvent{Event: "resigned", Name: name, Value: value, Token: token})
}

// observeCmd prints election name's leader, then each new leader and
// each new value, until ctx ends (SIGINT, SIGTERM: exit status 0).
func observeCmd(ctx context.Context, p printer, c *client.Client, name string) error {
	for l := range c.Election(name).Observe(ctx) {
		if err := p.emit(leaderRecord(name, l)); err != nil {
			return err
		}
	}
	if ctx.Err() == nil {
		return fmt.Errorf("observing election %s ended", name)
	}
	return nil
}

// electEvent is one line of elect's output: elected (or not_elected,
// -wait passed), then resigned or lost.
type electEvent struct {
	// Event is elected, not_elected, resigned or lost.
	Event string `json:"event"`
	Name  string `json:"name"`
	Value string `json:"value"`
	// Token is the leadership's fencing token, its term.
	Token uint64 `json:"token,omitempty"`
	// WaitedMs is how long the campaign took (elected, not_elected).
	WaitedMs int64 `json:"waited_ms,omitempty"`
}

func (e electEvent) table(w io.Writer) error {
	var err error
	switch e.Event {
	case "elected":
		_, err = fmt.Fprintf(w, "elected leader of %s with value %q after %s, token %d\n", e.Name, e.Value,
			time.Duration(e.WaitedMs)*time.Millisecond, e.Token)
	case "not_elected":
		_, err = fmt.Fprintf(w, "not elected leader of %s within %s\n", e.Name, time.Duration(e.WaitedMs)*time.Millisecond)
	case "lost":
		_, err = fmt.Fprintf(w, "lost the leadership of %s (token %d)\n", e.Name, e.Token)
	default:
		_, err = fmt.Fprintf(w, "%s the leadership of %s (token %d)\n", e.Event, e.Name, e.Token)
	}
	return err
}

// leaderEvent is one line of elect observe's output: a leader, or a new
// value of the same leader (same token).
type leaderEvent struct {
	// Time is when paxlockctl received it (RFC 3339, UTC).
	Time  string `json:"time"`
	Name  string `json:"name"`
	Value string `json:"value"`
	// Token is the leader's fencing token, its term.
	Token uint64 `json:"token"`
	// Holder is the leader's lock owner, client/id in hex.
	Holder string `json:"holder"`
}

func leaderRecord(name string, l client.Leader) leaderEvent {
	return leaderEvent{Time: time.Now().UTC().Format(time.RFC3339Nano), Name: name, Value: l.Value, Token: l.Token, Holder: l.Holder.String()}
}

func (e leaderEvent) table(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%s %s leader %q token %d holder %s\n", e.Time, e.Name, e.Value, e.Token, e.Holder)
	return err
}
