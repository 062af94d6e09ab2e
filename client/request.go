// This file sends requests: one attempt, the retries with backoff,
// redirects and the answers' routing, and the millisecond fields of the
// requests' messages.

package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// result is the outcome of a routed request.
type result struct {
	resp *wire.Response
	cn   *conn
	// master is the node the request was meant for: cn's address, or the
	// master's when cn is another node that relayed it (see attempt).
	// Blocked acquires and watches are bound to it.
	master string
	// unknown: an earlier attempt may have reached the server and been
	// applied (its connection broke, or it timed out, before the reply).
	unknown bool
}

// do sends a keyed request to the master of the key's group and returns
// the first non-retryable answer. It follows MASTER_REDIRECT and MOVED
// (to the cluster the namespace moved to: see followMoved), waits out
// NO_MASTER, OVERLOADED and MOVING (RetryAfterMs or backoff), re-sends after
// TIMEOUT and broken connections, refreshing the view as it goes, up to
// MaxRetries re-sends and within ctx. Every request the client sends is
// safe to repeat: a re-sent Acquire by the holder keeps its token.
func (c *Client) do(ctx context.Context, op, key string, hash uint64, typ wire.Type, m wire.Message) (result, error) {
	return c.doEach(ctx, op, key, hash, typ, m, nil)
}

// doWait is do for the Acquire m of the blocking acquire w, whose wait
// was first sent at first: each attempt says how long the wait has waited
// by then (wire.Acquire.WaitedMs), so that a master it reaches after a
// master change or a namespace move queues it where its first arrival
// put it, however long the attempts in between waited out MOVING or
// NO_MASTER. When the answer is LOCK_WAIT, w is bound to the node that
// queued it, and told to re-send at once if that node's connection is
// already gone or a view that arrived meanwhile names another master.
func (c *Client) doWait(ctx context.Context, w *waiter, key string, m *wire.Acquire, first time.Time) (result, error) {
	before := c.view.Load()
	res, err := c.doEach(ctx, "lock", key, w.hash, wire.TypeAcquire, m, func() {
		m.WaitedMs = waitedMs(time.Since(first))
	})
	if err == nil && res.resp.Status == wire.StatusLockWait {
		// Bound first, checked after: a view that arrives later finds
		// the waiter bound (updateView signals it).
		c.setWaiterConn(w, res.cn, res.master)
		if res.cn.dead() || c.movedSince(before, w.hash, res.master) {
			w.signalResend()
		}
	}
	return res, err
}

// doEach is do, calling before (when not nil) ahead of every attempt.
func (c *Client) doEach(ctx context.Context, op, key string, hash uint64, typ wire.Type, m wire.Message, before func()) (result, error) {
	var (
		res       result
		lastErr   error
		authErr   error // a node's AUTH_FAILED, retried (see below)
		target    string
		redirects int
		// moved counts the attempts that followed a view moving the key's
		// master (a pause cut short): they do not use up a retry, up to
		// MaxRetries of them. A drain or failover pushes a view per group
		// moved, and a request must not spend its retries on them faster
		// than its backoff would.
		moved int
		// moving counts the attempts answered MOVING: a namespace move
		// under way, waited out within ctx without using up retries.
		moving int
	)
	c.injectTrace(ctx, m)
	stop := c.stopFor(ctx)
	for attempt := 0; ; attempt++ {
		if isDone(stop) {
			return res, ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return res, ctxErr(op, key, err, cmp.Or(authErr, lastErr))
		}
		delay := time.Duration(-1) // -1: the usual backoff
		// Routing failures wait for the backoff or a newer view, whichever
		// comes first: a failover shows up as a view push.
		var viewCh <-chan struct{}
		routing := c.viewChanged()
		routedTo, _ := c.masterAddr(hash) // the master as that view has it
		if before != nil {
			before()
		}
		r, cn, master, err := c.attempt(ctx, stop, hash, target, typ, m, redirects)
		target = ""
		var p retryPolicy
		if err == nil {
			res.resp, res.cn, res.master = r, cn, master
			if p = statusRetry[r.Status]; !p.retry {
				return res, nil // an answer for the caller, AUTH_FAILED included
			}
			switch p.view {
			case viewRefresh:
				c.refresh()
			case viewRefreshWide:
				c.refreshWide()
			case viewFollowMoved:
				c.followMoved(r.Redirect, cn.addr)
			}
			follow := false
			if r.Status == wire.StatusMasterRedirect {
				redirects++
				if follow = r.Redirect != "" && r.Redirect != cn.addr; follow {
					target = r.Redirect
				}
			}
			delay = p.delay(c, attempt, r, redirects, follow)
			lastErr = statusErr(op, key, r)
			res.resp = nil
		} else {
			var ctxEnded bool
			p, ctxEnded = errorPolicy(err, ctx.Err() != nil, c.view.Load() != nil)
			switch {
			case ctxEnded:
				if cn != nil {
					res.unknown = true // the request may have been sent
				}
				return res, ctxErr(op, key, ctx.Err(), cmp.Or(authErr, lastErr))
			case !p.retry:
				return res, err
			}
			lastErr = attemptErr(op, key, cn, err)
			if errors.Is(err, ErrAuth) {
				// If no attempt gets further, the call fails with this
				// refusal, whatever the later attempts met.
				authErr = err
			}
		}
		res.unknown = res.unknown || p.unknown
		if p.wake {
			viewCh = routing
		}
		if p.free {
			moving++
		}
		if attempt-moved-moving >= c.cfg.MaxRetries {
			if authErr != nil {
				return res, authErr
			}
			return res, lastErr
		}
		if delay < 0 {
			delay = c.backoff(attempt + 1)
		}
		early, err := c.sleepOrMove(ctx, delay, viewCh, hash, routedTo)
		if early && moved < c.cfg.MaxRetries {
			moved++
		}
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return res, ErrClosed
			}
			return res, ctxErr(op, key, err, cmp.Or(authErr, lastErr))
		}
	}
}

// movedSince reports whether the current view, compared with before (the
// view when a wait or watch was sent), names another master than addr for
// hash's group or a new term of it (see newTerm). A view that arrived
// while the request was in flight is handled here, since updateView did
// not yet know where the request went.
func (c *Client) movedSince(before *wire.View, hash uint64, addr string) bool {
	v := c.view.Load()
	if v == nil || v == before {
		return false
	}
	return newTerm(before, v, wire.GroupOf(hash, len(v.Groups)), addr)
}

// sleepOrMove is sleepOrView for a routing failure of hash's request
// sent to master: it ends early only once a newer view names another
// master for hash's group, and then reports early. Views that leave that
// master where it was (a failover moves the groups one by one, each a
// view push) do not end it, so that they do not use up the request's
// retries.
func (c *Client) sleepOrMove(ctx context.Context, d time.Duration, viewCh <-chan struct{}, hash uint64, master string) (early bool, err error) {
	if viewCh == nil {
		return false, c.sleepOrView(ctx, d, nil)
	}
	end := time.Now().Add(d)
	for {
		if err := c.sleepOrView(ctx, time.Until(end), viewCh); err != nil {
			return false, err
		}
		if !isDone(viewCh) || !time.Now().Before(end) {
			return false, nil // slept d
		}
		if a, _ := c.masterAddr(hash); a != master {
			return true, nil
		}
		viewCh = c.viewChanged()
	}
}

// attempt sends m once: to target if set, else to the master of hash's
// group in the current view, with m's Redirects set to redirects. When that
// node cannot be reached (a dial failed just now or recently), it sends m
// through another node instead, with Redirects = wire.ForwardNow, and that
// node forwards it to the master (see wire.Routed). A nil error means a
// Response arrived; cn is set whenever the request was handed to a
// connection; master is the address m was meant for.
func (c *Client) attempt(ctx context.Context, stop <-chan struct{}, hash uint64, target string, typ wire.Type, m wire.Message, redirects int) (*wire.Response, *conn, string, error) {
	addr := target
	if addr == "" {
		a, ok := c.masterAddr(hash)
		if !ok {
			c.refreshWide()
			return nil, nil, "", ErrNoMaster
		}
		addr = a
	}
	rt, routed := m.(wire.Routed)
	if routed {
		rt.SetRedirectCount(uint8(min(redirects, wire.ForwardNow-1)))
	}
	var cn *conn
	err := ErrUnavailable
	skip, why := false, error(nil)
	if routed {
		skip, why = c.dialSkip(addr)
	}
	switch {
	case !skip:
		cn, err = c.getConn(ctx, addr)
	case errors.Is(why, ErrAuth):
		// The node is skipped because it refused the namespace at its
		// last dial (another call's, or a reconnect's): that refusal is
		// this attempt's answer, not an unreachable node, so that a call
		// after the namespace was removed or its secret changed ends with
		// ErrAuth rather than ErrUnavailable.
		err = why
	}
	if err != nil && routed && errors.Is(err, ErrUnavailable) && ctx.Err() == nil {
		if rc := c.relayConn(ctx, addr); rc != nil {
			c.log.Debug("paxlock: master unreachable, sending through another node", "master", addr, "via", rc.addr)
			rt.SetRedirectCount(wire.ForwardNow)
			cn, err = rc, nil
		}
	}
	if err != nil {
		if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrClosed) {
			c.refresh()
		}
		return nil, nil, addr, err
	}
	rtyp, msg, err := cn.roundTrip(ctx, typ, m, c.cfg.RequestTimeout)
	switch {
	case err == nil:
	case errors.Is(err, errConnLost) && isDone(stop):
		return nil, cn, addr, ErrClosed
	case errors.Is(err, errConnLost), errors.Is(err, errAttemptTimeout), errors.Is(err, ErrOverloaded), ctx.Err() != nil:
		return nil, cn, addr, err
	default:
		return nil, cn, addr, fmt.Errorf("%w: %s: %w", ErrServer, cn.addr, err)
	}
	r, ok := msg.(*wire.Response)
	if !ok {
		return nil, cn, addr, fmt.Errorf("%w: unexpected %s reply from %s", ErrServer, rtyp, cn.addr)
	}
	return r, cn, addr, nil
}

// unreachable reports whether addr has no working connection and its last
// dial failed within the reconnect backoff, so that dialing it again now
// would only wait.
func (c *Client) unreachable(addr string) bool {
	skip, _ := c.dialSkip(addr)
	return skip
}

// dialSkip is unreachable, with the error of the dial that makes addr
// unreachable (nil when it is not).
func (c *Client) dialSkip(addr string) (bool, error) {
	// The request path's common case, a live connection, without c.mu.
	if m := c.connView.Load(); m != nil {
		if cn := (*m)[addr]; cn != nil && !cn.dead() {
			return false, nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cn := c.conns[addr]; cn != nil && !cn.dead() {
		return false, nil
	}
	f := c.dialFails[addr]
	if f.n > 0 && time.Since(f.last) < c.backoffCeil(f.n) {
		return true, f.err
	}
	return false, nil
}

// relayConn returns a working connection to a node of the view other than
// master, to relay a request through: the view subscription's, else any
// open one, else the first candidate that can be dialed. nil if there is
// none.
func (c *Client) relayConn(ctx context.Context, master string) *conn {
	// Only a node of the view relays: a registry process (whose
	// connection may be the view subscription) serves views, not locks.
	nodes := map[string]bool{}
	if v := c.view.Load(); v != nil {
		for _, n := range v.Nodes {
			nodes[n.Addr] = true
		}
	}
	relay := func(a string) bool { return a != master && nodes[a] }
	c.mu.Lock()
	if cn := c.subConn; cn != nil && !cn.dead() && relay(cn.addr) {
		c.mu.Unlock()
		return cn
	}
	for a, cn := range c.conns {
		if relay(a) && !cn.dead() {
			c.mu.Unlock()
			return cn
		}
	}
	c.mu.Unlock()
	for _, a := range c.candidates() {
		if !relay(a) || c.unreachable(a) {
			continue
		}
		if cn, err := c.getConn(ctx, a); err == nil {
			return cn
		}
	}
	return nil
}

// ctxErr wraps the context's error, mentioning the last retryable failure.
func ctxErr(op, key string, err, last error) error {
	if err == nil {
		err = context.Canceled
	}
	switch {
	case errors.Is(last, ErrOverloaded), errors.Is(last, ErrAuth):
		// Refused to the end (a quota, a bound, a node that does not
		// know the namespace): errors.Is finds ErrOverloaded or ErrAuth
		// too, so the caller learns why it waited in vain.
		return fmt.Errorf("client: %s %q: %w (last: %w)", op, key, err, last)
	case last != nil:
		return fmt.Errorf("client: %s %q: %w (last: %v)", op, key, err, last)
	}
	return fmt.Errorf("client: %s %q: %w", op, key, err)
}

// The millisecond fields of the requests.

// waitMs converts a positive remaining wait into MaxWaitMs (at least 1).
func waitMs(d time.Duration) uint32 {
	if d >= maxTTLField {
		return uint32(maxTTLField / time.Millisecond)
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return uint32(max(ms, 1))
}

// waitedMs converts the time a wait has waited into WaitedMs (0 on its
// first send).
func waitedMs(d time.Duration) uint32 {
	return uint32(min(max(d, 0), maxTTLField) / time.Millisecond)
}

// ttlMs converts a TTL into TTLMs: at least 1 ms, at most maxTTLField.
func ttlMs(d time.Duration) uint32 {
	return uint32(min(max(d, time.Millisecond), maxTTLField) / time.Millisecond)
}

// maxHoldMs converts a maximum hold time into Acquire.MaxHoldMs, rounding
// up to the millisecond: the server's bound is then no sooner than the
// client's.
func maxHoldMs(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min((d+time.Millisecond-1)/time.Millisecond, wire.MaxHoldLimitMs))
}

// lockDelayMs converts a lock-delay into Acquire.LockDelayMs, rounding
// up: a delay is never shortened.
func lockDelayMs(d time.Duration) uint32 {
	return uint32(min((d+time.Millisecond-1)/time.Millisecond, wire.MaxLockDelayMs))
}
