// This file is the retry policy of a request: for each outcome of one
// attempt (a status, or an error that got no answer), whether doEach
// retries it, after what wait and with what done to the view first.

package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// retryPolicy is what doEach does after an attempt's outcome. The zero
// policy fails: the outcome goes to the caller.
type retryPolicy struct {
	retry bool      // false: the answer (or the error) goes to the caller
	wait  retryWait // how long to wait before the next attempt
	view  viewStep  // what is done to the client's view first
	// wake: the wait ends early once a newer view names another master
	// for the key's group (see sleepOrMove).
	wake bool
	// unknown: the attempt may have reached the master and been applied.
	unknown bool
	// free: the attempt does not use up one of MaxRetries (a namespace
	// move under way is waited out within ctx).
	free bool
	// needsView: retried only once the client has a view; else it fails.
	needsView bool
}

// retryWait is how long doEach waits before the next attempt.
type retryWait uint8

const (
	// waitBackoff is the usual backoff for the attempt's number.
	waitBackoff retryWait = iota
	// waitHinted is the server's RetryAfterMs, at least the backoff.
	waitHinted
	// waitHint is the server's RetryAfterMs, at least 1 ms.
	waitHint
	// waitRedirect is no wait for the first two redirects to a named
	// node, then the backoff.
	waitRedirect
)

// viewStep is what doEach does to the client's view before it retries.
type viewStep uint8

const (
	viewKeep        viewStep = iota
	viewRefresh              // fetch a newer view (a redirect)
	viewRefreshWide          // fetch one from every source (no master)
	viewFollowMoved          // follow the namespace to its new cluster
)

// statusRetry is the policy for an answer, by status. A status not listed
// is an answer for the caller (AUTH_FAILED included).
var statusRetry = map[wire.Status]retryPolicy{
	wire.StatusMasterRedirect: {retry: true, wait: waitRedirect, view: viewRefresh},
	wire.StatusNoMaster:       {retry: true, wait: waitHinted, view: viewRefreshWide, wake: true},
	wire.StatusOverloaded:     {retry: true, wait: waitHinted},
	wire.StatusMoving:         {retry: true, wait: waitHint, wake: true, free: true},
	wire.StatusMoved:          {retry: true, wait: waitBackoff, view: viewFollowMoved, wake: true},
	wire.StatusTimeout:        {retry: true, wait: waitBackoff, unknown: true},
}

// errRule is the policy for an attempt that got no answer and whose
// error wraps one of is, or, for the rule with ctxEnded, whose context
// ended.
type errRule struct {
	is       []error
	ctxEnded bool
	policy   retryPolicy
}

// errorRetry is the policy for an attempt that got no answer: the first
// rule that matches applies; an error no rule matches (an encoding
// error, an unexpected reply) goes to the caller. A node's AUTH_FAILED
// for a namespace the client's registry (or another node) accepted with
// the same secret means the node has not applied the namespace yet (it
// was just added, or moved to this cluster): it is retried as an
// unavailable node while the client has a view.
var errorRetry = []errRule{
	{is: []error{ErrAuth}, policy: retryPolicy{retry: true, wake: true, needsView: true}},
	{is: []error{ErrClosed}},
	{is: []error{errConnLost, errAttemptTimeout}, policy: retryPolicy{retry: true, wake: true, unknown: true}},
	{ctxEnded: true},
	{is: []error{ErrOverloaded}, policy: retryPolicy{retry: true}},
	{is: []error{ErrNoMaster, ErrUnavailable}, policy: retryPolicy{retry: true, wake: true}},
}

// errorPolicy returns errorRetry's policy for err, and whether the rule
// that applies is the one for an ended context.
func errorPolicy(err error, ctxDone, haveView bool) (retryPolicy, bool) {
	for _, r := range errorRetry {
		if r.ctxEnded {
			if ctxDone {
				return r.policy, true
			}
			continue
		}
		for _, s := range r.is {
			if errors.Is(err, s) {
				if r.policy.needsView && !haveView {
					return retryPolicy{}, false
				}
				return r.policy, false
			}
		}
	}
	return retryPolicy{}, false
}

// delay is how long p waits before attempt+1, given the answer r (nil
// for an error), the redirects followed so far and whether the redirect
// named a node to follow.
func (p retryPolicy) delay(c *Client, attempt int, r *wire.Response, redirects int, follow bool) time.Duration {
	var hint time.Duration
	if r != nil {
		hint = time.Duration(r.RetryAfterMs) * time.Millisecond
	}
	switch p.wait {
	case waitHinted:
		return max(hint, c.backoff(attempt+1))
	case waitHint:
		return max(hint, time.Millisecond)
	case waitRedirect:
		if follow && redirects <= 2 {
			return 0
		}
	}
	return c.backoff(attempt + 1)
}

// attemptErr is the error a retried attempt that got no answer leaves
// for the caller, should no later attempt get further.
func attemptErr(op, key string, cn *conn, err error) error {
	switch {
	case errors.Is(err, ErrAuth):
		return err
	case errors.Is(err, errAttemptTimeout):
		return fmt.Errorf("%w: %s %q at %s: %w", ErrTimeout, op, key, cn.addr, err)
	case errors.Is(err, errConnLost):
		return fmt.Errorf("%w: %s %q: %w", ErrUnavailable, op, key, err)
	}
	return fmt.Errorf("client: %s %q: %w", op, key, err)
}
