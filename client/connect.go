// This file dials and keeps the client's connections to the nodes, one per
// address, with the handshake.

package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// getConn returns a working connection to addr, dialing (once, shared by
// concurrent callers) if there is none.
func (c *Client) getConn(ctx context.Context, addr string) (*conn, error) {
	if m := c.connView.Load(); m != nil {
		if cn := (*m)[addr]; cn != nil && !cn.dead() {
			return cn, nil
		}
	}
	stop := c.stopFor(ctx)
	if isDone(stop) {
		return nil, ErrClosed
	}
	c.mu.Lock()
	if c.netClosed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if cn := c.conns[addr]; cn != nil && !cn.dead() {
		c.mu.Unlock()
		return cn, nil
	}
	d := c.dials[addr]
	if d == nil {
		d = &dialing{done: make(chan struct{})}
		c.dials[addr] = d
		go c.dial(addr, d)
	}
	c.mu.Unlock()
	select {
	case <-d.done:
		return d.cn, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-stop:
		return nil, ErrClosed
	}
}

// publishConnsLocked refreshes connView from conns; c.mu is held.
func (c *Client) publishConnsLocked() {
	m := make(map[string]*conn, len(c.conns))
	for a, cn := range c.conns {
		m[a] = cn
	}
	c.connView.Store(&m)
}

// dial connects to addr and says Hello, after a pause if recent attempts
// to addr failed (reconnect backoff).
func (c *Client) dial(addr string, d *dialing) {
	cn, err := c.dialHello(addr)
	c.mu.Lock()
	delete(c.dials, addr)
	switch {
	case err == nil && c.netClosed:
		err = ErrClosed
	case err == nil:
		c.conns[addr] = cn
		c.publishConnsLocked()
		cn.ready = true
		delete(c.dialFails, addr)
	default:
		f := c.dialFails[addr]
		c.dialFails[addr] = dialFailure{n: f.n + 1, last: time.Now(), err: err}
	}
	c.mu.Unlock()
	if err != nil && cn != nil {
		cn.fail(err)
		cn = nil
	}
	d.cn, d.err = cn, err
	close(d.done)
}

func (c *Client) dialHello(addr string) (*conn, error) {
	c.mu.Lock()
	f := c.dialFails[addr]
	c.mu.Unlock()
	if f.n > 0 {
		wait := time.Until(f.last.Add(c.backoff(f.n)))
		if err := c.sleep(c.ctx, wait); err != nil {
			return nil, ErrClosed
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout)
	defer cancel()
	sc, r, err := session.Dial(ctx, addr, c.sessionConfig())
	var refused *session.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Reply.Status == wire.StatusAuthFailed:
		return nil, fmt.Errorf("%w: namespace %q at %s: %s", ErrAuth, c.cfg.Namespace, addr, refused.Reply.Msg)
	case errors.Is(err, scramauth.ErrServerUnverified):
		return nil, fmt.Errorf("%w: namespace %q at %s: %w", ErrAuth, c.cfg.Namespace, addr, err)
	case errors.As(err, &refused):
		return nil, fmt.Errorf("hello to %s: %w", addr, statusErr("hello", c.cfg.Namespace, &refused.Reply))
	case errors.Is(err, session.ErrUnexpectedReply):
		return nil, fmt.Errorf("%w: %w", ErrServer, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cn := newConn(c, addr, sc)
	cn.start()
	c.noteViewVersion(r.ViewVersion)
	c.log.Debug("paxlock: connected", "addr", addr)
	return cn, nil
}

// onConnLost runs once per failed connection: it forgets the connection
// and re-routes what lived on it. Blocked acquires re-send themselves;
// watches register again; the view subscription moves to another node.
func (c *Client) onConnLost(cn *conn, cause error) {
	c.mu.Lock()
	live := cn.ready // false for a connection that failed before dial registered it
	if c.conns[cn.addr] == cn {
		delete(c.conns, cn.addr)
		c.publishConnsLocked()
	}
	sub := c.subConn == cn
	if sub {
		c.subConn = nil
	}
	var orphans []*waiter
	for id, w := range c.waits {
		if w.conn != cn {
			continue
		}
		if w.abandoned {
			// The server forgets a connection's waiters when it closes.
			delete(c.waits, id)
			orphans = append(orphans, w)
			continue
		}
		w.signalResend()
	}
	var rereg []*Watcher
	for _, w := range c.watches {
		if w.conn == cn {
			w.conn = nil
			rereg = append(rereg, w)
		}
	}
	closed := c.netClosed
	c.mu.Unlock()
	for _, w := range orphans {
		c.unrefOwnerLock(w.state)
	}
	if closed || !live {
		return
	}
	c.log.Debug("paxlock: connection lost", "addr", cn.addr, "err", cause)
	if sub {
		select {
		case c.subLostCh <- struct{}{}:
		default:
		}
	}
	c.refresh()
	for _, w := range rereg {
		w.reregister()
	}
}
