package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// maxQueued bounds the bytes waiting in one connection's send buffer; a
// request beyond it fails with ErrOverloaded instead of growing memory
// without bound while the node does not read.
const maxQueued = 32 << 20

// reply is what a request's waiter receives: the reply frame's type and
// body, or the error that ended the request.
type reply struct {
	typ wire.Type
	msg wire.Message
	err error
}

// call is one request in flight. Its channel has room for the one reply,
// so the reader never blocks on a caller that gave up.
//
// Calls of ordinary requests are recycled (callPool) once their one reply
// was received, or once forget took them out of pending before any reply
// was sent: then nothing else refers to them and their channel is empty.
// A call whose caller gave up after the reader or Closed took it is left
// to the garbage collector.
type call struct {
	ch chan reply
	// timer bounds an attempt (roundTrip's timeout); created on first use
	// and stopped before the call goes back to the pool. Since Go 1.23 a
	// stopped or reset timer delivers no stale tick.
	timer *time.Timer
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan reply, 1)} }}

func getCall() *call { return callPool.Get().(*call) }

// putCall recycles cl; its channel must be empty and nothing else may
// refer to it.
func putCall(cl *call) {
	if cl.timer != nil {
		cl.timer.Stop()
	}
	callPool.Put(cl)
}

// conn is one multiplexed connection to a node, over a session (package
// session: dial, Hello, heartbeats, the batching writer and the reader).
// Callers encode their frames into the session's send queue and record
// their call in pending under the session's one lock, then wake the
// writer, which sends everything queued in one Write; the reader hands
// each frame to Frame, which dispatches replies to pending calls by request
// id and pushes to the Client. No goroutine exists per request.
type conn struct {
	c    *Client
	addr string
	sc   *session.Conn
	rdec wire.Codec // Frame's, on the session's reader only

	// guarded by sc's lock
	pending map[uint64]*call
	nextID  uint64

	ready bool // guarded by Client.mu: Hello succeeded, in Client.conns
}

// newConn wraps an open session; start serves it.
func newConn(c *Client, addr string, sc *session.Conn) *conn {
	return &conn{c: c, addr: addr, sc: sc, pending: make(map[uint64]*call)}
}

// start serves the connection in the background until it fails.
func (cn *conn) start() {
	go func() { _ = cn.sc.Run(cn) }()
}

// sessionConfig is the session configuration of the client's connections.
func (c *Client) sessionConfig() session.Config {
	cfg := &c.cfg
	dial := cfg.Dial
	if cfg.TLS != nil {
		dial = tlsDial(cfg.Dial, cfg.TLS)
	}
	return session.Config{
		Dial: dial,
		Handshake: session.SCRAM(wire.ScramClientFirst{
			Namespace: cfg.Namespace, ClientID: c.id, ClientKey: c.key, Agent: Agent,
		}, cfg.Secret),
		MaxFrame:          cfg.MaxFrame,
		HeartbeatInterval: cfg.HeartbeatInterval,
		HeartbeatTimeout:  cfg.HeartbeatTimeout,
		WriteTimeout:      cfg.RequestTimeout + cfg.HeartbeatTimeout,
		MaxQueued:         maxQueued,
	}
}

// tlsDial runs TLS with conf over the connections dial opens.
func tlsDial(dial func(ctx context.Context, addr string) (net.Conn, error), conf *tls.Config) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		nc, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		tc := conf.Clone()
		if tc.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				tc.ServerName = host
			}
		}
		t := tls.Client(nc, tc)
		if err := t.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("tls: %w", err)
		}
		return t, nil
	}
}

// dead reports whether the connection has failed.
func (cn *conn) dead() bool {
	select {
	case <-cn.sc.Done():
		return true
	default:
		return false
	}
}

// lostErr is the error of a request on a connection that failed.
func (cn *conn) lostErr(cause error) error {
	return fmt.Errorf("%w: %s: %w", errConnLost, cn.addr, cause)
}

// send queues one request and returns its id and call.
func (cn *conn) send(typ wire.Type, m wire.Message) (uint64, *call, error) {
	cl := getCall()
	sc := cn.sc
	sc.Lock()
	id := cn.nextID + 1
	if err := sc.AppendLocked(typ, id, m); err != nil {
		sc.Unlock()
		putCall(cl)
		switch {
		case errors.Is(err, session.ErrClosed):
			return 0, nil, cn.lostErr(sc.Err())
		case errors.Is(err, session.ErrQueueFull):
			return 0, nil, fmt.Errorf("%w: send queue to %s full", ErrOverloaded, cn.addr)
		}
		return 0, nil, fmt.Errorf("client: %w", err)
	}
	cn.nextID = id
	cn.pending[id] = cl
	sc.Unlock()
	sc.Flush()
	return id, cl, nil
}

// forget drops a request whose caller gave up; a late reply is discarded.
// It reports whether the call was still pending (so that no reply was or
// will be sent to it).
func (cn *conn) forget(id uint64) bool {
	cn.sc.Lock()
	_, ok := cn.pending[id]
	delete(cn.pending, id)
	cn.sc.Unlock()
	return ok
}

// drop ends a call whose caller gave up, recycling it if no reply can
// reach it any more.
func (cn *conn) drop(id uint64, cl *call) {
	if cn.forget(id) {
		putCall(cl)
	}
}

// roundTrip sends one request and waits for its reply, the context, the
// attempt timeout (if positive) or the connection's failure.
func (cn *conn) roundTrip(ctx context.Context, typ wire.Type, m wire.Message, timeout time.Duration) (wire.Type, wire.Message, error) {
	id, cl, err := cn.send(typ, m)
	if err != nil {
		return 0, nil, err
	}
	var expired <-chan time.Time
	if timeout > 0 {
		if cl.timer == nil {
			cl.timer = time.NewTimer(timeout)
		} else {
			cl.timer.Reset(timeout)
		}
		expired = cl.timer.C
	}
	select {
	case r := <-cl.ch:
		putCall(cl)
		return r.typ, r.msg, r.err
	case <-ctx.Done():
		cn.drop(id, cl)
		return 0, nil, ctx.Err()
	case <-expired:
		cn.drop(id, cl)
		return 0, nil, errAttemptTimeout
	}
}

// post sends a request whose reply nobody waits for (Unwatch on Close).
func (cn *conn) post(typ wire.Type, m wire.Message) {
	if id, cl, err := cn.send(typ, m); err == nil {
		cn.drop(id, cl)
	}
}

// fail closes the connection once, with cause; Closed does the rest.
func (cn *conn) fail(cause error) { cn.sc.Close(cause) }

// Closed implements session.Handler: it fails every pending call with the
// cause and tells the Client.
func (cn *conn) Closed(cause error) {
	err := cn.lostErr(cause)
	cn.sc.Lock()
	pending := cn.pending
	cn.pending = nil
	cn.sc.Unlock()
	for _, cl := range pending {
		cl.ch <- reply{err: err}
	}
	cn.c.onConnLost(cn, cause)
}

// Heartbeat implements session.Handler: a node that knows a newer view
// makes the Client fetch it.
func (cn *conn) Heartbeat(r *wire.Response) { cn.c.noteViewVersion(r.ViewVersion) }

// Frame implements session.Handler: replies go to their pending calls by
// id, pushes to the Client. It runs on the session's reader.
func (cn *conn) Frame(f wire.Frame, _ []byte) {
	if f.IsPush() {
		if !f.Type.IsPush() || !f.Type.Known() {
			return
		}
		m, err := cn.rdec.Decode(f.Type, f.Body)
		if err != nil {
			cn.c.log.Debug("paxlock: undecodable push", "addr", cn.addr, "type", f.Type, "err", err)
			return
		}
		cn.c.onPush(cn, m)
		return
	}
	cn.sc.Lock()
	cl := cn.pending[f.ReqID]
	delete(cn.pending, f.ReqID)
	cn.sc.Unlock()
	if cl == nil {
		return // the caller gave up
	}
	var m wire.Message
	var err error
	if !f.Type.IsReply() {
		err = fmt.Errorf("client: %s frame in reply to request %d", f.Type, f.ReqID)
	} else {
		m, err = cn.rdec.Decode(f.Type, f.Body)
	}
	cl.ch <- reply{typ: f.Type, msg: m, err: err}
}
