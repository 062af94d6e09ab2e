package client

import (
	"context"

	"github.com/paxlock/paxlock/client/wire"
)

// TokenCheck is CheckTokenState's answer.
type TokenCheck struct {
	// Current reports whether the token is a current hold's: the key's
	// master holds a hold with that token whose TTL has not run out on
	// its clock.
	Current bool
	// State is that hold when Current (Holder, Token, Value and TTLLeft
	// are the hold's), and otherwise the key's state as the master saw it
	// (Held false when the key is free; Token then, if Held, a current
	// holder's token, which is not the one asked about).
	State State
}

// CheckToken asks the master of key's group whether token is the fencing
// token of a current hold of key (Chubby's CheckSequencer): true while
// the hold that token was granted with is still held, false once it was
// released, expired or revoked, or when the key was granted again since
// (a token is never reused: tokens of a key only grow). The master
// answers from its state under its lease, without a Paxos round, so the
// answer is as of the moment it was given: a service guarding a resource
// checks the token right before acting on a request that carries it, and
// a resource that can remember the highest token it saw should also
// refuse older ones (see USAGE.md).
//
// token 0 is never granted: it is refused with an error wrapping
// ErrInvalid. A server that predates token checks answers with the
// key's first holder, so that a reader's token other than the first
// reader's is reported not current (never the other way round).
func (c *Client) CheckToken(ctx context.Context, key string, token uint64) (bool, error) {
	tc, err := c.CheckTokenState(ctx, key, token)
	return tc.Current, err
}

// CheckTokenState is CheckToken with the master's view of the key: the
// hold with token when it is current, the key's state otherwise.
func (c *Client) CheckTokenState(ctx context.Context, key string, token uint64) (TokenCheck, error) {
	if c == nil {
		return TokenCheck{}, invalid("nil *Client")
	}
	if err := validKey(key); err != nil {
		return TokenCheck{}, err
	}
	if token == 0 {
		return TokenCheck{}, invalid("token 0: no lock is granted with it")
	}
	res, err := c.do(ctx, "check", key, wire.KeyHash(c.cfg.Namespace, key), wire.TypeState, &wire.State{Key: key, Token: token})
	if err != nil {
		return TokenCheck{}, err
	}
	st, ok := stateOf(key, res.resp)
	if !ok {
		return TokenCheck{}, statusErr("check", key, res.resp)
	}
	return TokenCheck{Current: st.Held && st.Token == token && st.TTLLeft > 0, State: st}, nil
}
