package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"sync"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// relayDialTimeout bounds the dial and the Hello of a relay connection.
const relayDialTimeout = 3 * time.Second

// maxRelayQueue bounds the bytes waiting in one relay (while it dials, or
// when the master reads slowly); beyond it requests get OVERLOADED.
const maxRelayQueue = 8 << 20

// relayHeartbeatID is the request id of a relay's own heartbeats, whose
// replies it keeps to itself. A client's request ids count up from 1 on
// its connection, so they never reach it.
const relayHeartbeatID = math.MaxUint64

// errRelayClosed ends a relay whose client connection closed.
var errRelayClosed = errors.New("relay closed")

// errShuttingDown ends a relay of a node that is shutting down.
var errShuttingDown = errors.New("node shutting down")

// relay forwards the requests of one client connection that asked this
// node to deliver them to the master of their group (wire.Routed: the
// client was redirected too often, or cannot reach the master itself). It
// is a connection of its own to that master's client port, opened with the
// client's namespace, secret and id and with Hello.Via set, so the master
// serves the requests as the client's own and never forwards them again.
// Frames go through unchanged in both directions: requests keep the
// client's request ids, and replies and pushes (Granted, Lost, WatchEvent)
// come back to the client connection byte for byte. One relay per client
// connection and master keeps request, wait and watch ids in the client's
// own space, as on a direct connection.
//
// If the relay cannot be opened, the requests queued on it are answered
// NO_MASTER (retryable) and the next forwarded request dials again. Once it
// has carried requests, the master may hold waits and watches registered
// through it, which it forgets when the relay breaks; so a broken relay
// closes its client connection too, and the client re-sends its blocked
// acquires and watches as after any lost connection.
//
// Its goroutines (run and read) are the node's background work: Shutdown
// ends them (ctx derives from the node's life) and waits for them.
type relay struct {
	c      *conn
	node   uint32
	addr   string
	done   chan struct{} // closed when the relay has failed or closed
	wake   chan struct{} // cap 1: frames are queued
	ctx    context.Context
	cancel context.CancelFunc // called by fail

	mu     sync.Mutex
	out    []byte   // frames waiting for the writer
	queued []uint64 // request ids sent before the Hello was answered
	nc     net.Conn // set once the Hello succeeded
	err    error    // why the relay ended; nil while it works
}

// forward hands a routed request for group g, whose master is another
// node, to the relay for that master, opening it if needed. raw is the
// request's whole frame. It runs on the connection's event loop and never
// blocks.
func (c *conn) forward(g int, raw []byte, reqID uint64) {
	s := c.s
	gv := s.view.Load().Groups[g]
	r := c.relayTo(gv.Master, gv.Addr)
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		c.Respond(reqID, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50, Msg: "relay to the master failed"})
		return
	}
	if len(r.out)+len(raw) > maxRelayQueue {
		r.mu.Unlock()
		s.stats.overloaded.Add(1)
		c.Respond(reqID, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: 10, Msg: "relay to the master is backed up"})
		return
	}
	r.out = append(r.out, raw...)
	if r.nc == nil {
		r.queued = append(r.queued, reqID)
	}
	r.mu.Unlock()
	s.stats.forwarded.Add(1)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// relayTo returns the connection's relay to node, whose client address is
// addr, opening one if there is none or it failed. A node shutting down
// opens none: the relay returned has failed.
func (c *conn) relayTo(node uint32, addr string) *relay {
	c.relayMu.Lock()
	defer c.relayMu.Unlock()
	r := c.relays[node]
	if r != nil && !r.failed() {
		return r
	}
	r = &relay{c: c, node: node, addr: addr, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	r.ctx, r.cancel = context.WithCancel(c.s.life)
	if c.relays == nil {
		c.relays = make(map[uint32]*relay)
	}
	c.relays[node] = r
	if !c.s.goBackground(r.run) {
		r.fail(errShuttingDown)
	}
	return r
}

// closeRelays ends the connection's relays; it runs when the client
// connection closes.
func (c *conn) closeRelays() {
	c.relayMu.Lock()
	rs := c.relays
	c.relays = nil
	c.relayMu.Unlock()
	for _, r := range rs {
		r.fail(errRelayClosed)
	}
}

func (r *relay) failed() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// run dials the master, says Hello, then writes queued frames until the
// relay ends; a second goroutine reads.
func (r *relay) run() {
	nc, err := r.open()
	if err != nil {
		if r.ctx.Err() == nil {
			r.c.s.log.Warn("relay to master failed", "node", r.node, "addr", r.addr, "err", err)
		}
		r.fail(err)
		return
	}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		nc.Close()
		return
	}
	r.nc, r.queued = nc, nil
	r.mu.Unlock()
	r.c.s.stats.relays.Add(1)
	// Counted while run is (so the count is above zero): Shutdown waits
	// for the reader too.
	r.c.s.bg.Add(1)
	go func() {
		defer r.c.s.bg.Done()
		r.read(nc)
	}()
	// The master closes a connection idle for IdleTimeout; a relay that
	// only carries a blocked acquire's wait must stay open, so it sends a
	// Heartbeat when it has written nothing for a third of that.
	quiet := time.Duration(r.c.s.cfg.IdleTimeout) / 3
	hb := time.NewTicker(quiet / 2) // writes are at most 1.5 quiet apart
	defer hb.Stop()
	lastWrite := time.Now()
	var buf []byte
	for {
		select {
		case <-r.done:
			return
		case <-r.ctx.Done():
			r.fail(errShuttingDown)
			return
		case <-r.wake:
		case <-hb.C:
			if time.Since(lastWrite) < quiet {
				continue
			}
			r.mu.Lock()
			r.out, _ = wire.AppendFrame(r.out, wire.TypeHeartbeat, relayHeartbeatID, &wire.Heartbeat{})
			r.mu.Unlock()
		}
		r.mu.Lock()
		buf, r.out = r.out, buf[:0]
		r.mu.Unlock()
		if len(buf) == 0 {
			continue
		}
		if _, err := nc.Write(buf); err != nil {
			r.fail(fmt.Errorf("write: %w", err))
			return
		}
		lastWrite = time.Now()
	}
}

// open dials the master's client port and says Hello as the client, with
// Via naming this node. The relay's end (r.ctx) interrupts it.
func (r *relay) open() (net.Conn, error) {
	c := r.c
	d := net.Dialer{Timeout: relayDialTimeout}
	nc, err := d.DialContext(r.ctx, "tcp", r.addr)
	if err != nil {
		return nil, err
	}
	// Closing the connection is what interrupts the Hello's write and read.
	stopWatch := context.AfterFunc(r.ctx, func() { nc.Close() })
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	hello, err := wire.AppendFrame(nil, wire.TypeHello, 1, &wire.Hello{
		Namespace: c.ns, Secret: c.secret, ClientID: c.clientID, Agent: "paxlockd-relay", Via: c.s.cfg.NodeID,
	})
	if err == nil {
		_ = nc.SetDeadline(time.Now().Add(relayDialTimeout))
		_, err = nc.Write(hello)
	}
	var f wire.Frame
	if err == nil {
		f, _, err = wire.ReadFrame(nc, nil, c.s.cfg.MaxFrame)
	}
	if err == nil {
		var m wire.Message
		m, err = wire.Decode(f.Type, f.Body)
		if r, ok := m.(*wire.Response); err == nil && (!ok || r.Status != wire.StatusSuccess) {
			err = fmt.Errorf("hello answered %v", m)
		}
	}
	if !stopWatch() && err == nil {
		err = r.ctx.Err() // the relay ended meanwhile: nc is closed
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

// read relays every frame from the master to the client connection.
func (r *relay) read(nc net.Conn) {
	br := bufio.NewReaderSize(nc, 32<<10)
	var buf []byte
	for {
		f, b, err := wire.ReadFrame(br, buf, r.c.s.cfg.MaxFrame)
		buf = b
		if err != nil {
			r.fail(fmt.Errorf("read: %w", err))
			return
		}
		switch {
		case f.Type.IsPush() && f.Type != wire.TypeViewChanged:
			r.c.sendRaw(buf)
		case f.Type.IsReply() && f.ReqID != 0 && f.ReqID != relayHeartbeatID:
			r.c.inflight.Add(-1)
			r.c.sendRaw(buf)
		}
	}
}

// fail ends the relay once: requests still queued for a relay that never
// opened are answered NO_MASTER; a relay that carried requests closes its
// client connection (see relay).
func (r *relay) fail(err error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.err = err
	queued, nc := r.queued, r.nc
	r.queued, r.out = nil, nil
	r.mu.Unlock()
	r.cancel()
	close(r.done)
	if nc != nil {
		nc.Close()
	}
	c := r.c
	for _, id := range queued {
		c.Respond(id, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 50,
			Msg: fmt.Sprintf("node %d cannot reach the master (node %d)", c.s.cfg.NodeID, r.node)})
	}
	if nc != nil && !errors.Is(err, errRelayClosed) && !errors.Is(err, errShuttingDown) {
		c.s.log.Info("relay to master broke; closing its client connection", "node", r.node, "err", err)
		c.gc.Close()
	}
}
