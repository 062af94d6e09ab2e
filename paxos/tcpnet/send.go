package tcpnet

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/paxlock/paxlock/internal/rawio"
	"github.com/paxlock/paxlock/paxos"
)

// Send queues msgs for their peers (by To) and returns without waiting for
// any socket. Messages to Self are handed to Handler before Send returns
// (their Entries and Chunk are shared with the caller, so neither side may
// modify them). Messages for unknown peers, or that do not fit a peer's
// queue, are dropped.
func (t *Transport) Send(msgs []paxos.Message) {
	if t.isClosed.Load() {
		t.dropped.Add(uint64(len(msgs)))
		return
	}
	peers := *t.peers.Load()
	nself := 0
	var last *tcpPeer
	for i := range msgs {
		m := &msgs[i]
		if m.To == t.cfg.Self {
			nself++
			continue
		}
		p := peers[m.To]
		if p == nil {
			t.dropped.Add(1)
			continue
		}
		if last != nil && last != p {
			last.signal()
		}
		last = p
		p.enqueue(m)
	}
	if last != nil {
		last.signal()
	}
	if nself == 0 {
		return
	}
	local := make([]paxos.Message, 0, nself)
	for i := range msgs {
		if msgs[i].To == t.cfg.Self {
			local = append(local, msgs[i])
		}
	}
	t.local.Add(uint64(nself))
	t.deliver(local)
}

// enqueue appends m's frame to p's queue, or drops it.
func (p *tcpPeer) enqueue(m *paxos.Message) {
	t := p.t
	p.mu.Lock()
	start := len(p.pending)
	p.pending = append(p.pending, 0, 0, 0, 0)
	p.pending = paxos.AppendMessage(p.pending, m)
	n := len(p.pending) - start - 4
	// One message may exceed the queue cap on an empty queue, but never the
	// frame limit.
	if n > t.cfg.MaxFrameSize || (start > 0 && len(p.pending) > t.cfg.MaxQueueBytes) {
		p.pending = p.pending[:start]
		p.mu.Unlock()
		t.dropped.Add(1)
		if n > t.cfg.MaxFrameSize {
			t.log.Error("message exceeds frame limit; dropped", "peer", p.id, "type", m.Type, "group", m.Group, "bytes", n)
		}
		return
	}
	binary.BigEndian.PutUint32(p.pending[start:], uint32(n))
	p.npend++
	p.mu.Unlock()
}

func (p *tcpPeer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run is p's writer goroutine. It dials when there is something to send,
// waits an exponential backoff (tcpMinBackoff to tcpMaxBackoff) before each
// dial that follows a failed dial or a connection that died young, and
// discards what is queued whenever a dial fails.
func (p *tcpPeer) run() {
	t := p.t
	defer t.wg.Done()
	var (
		conn    net.Conn
		dead    *atomic.Bool // set when the peer closed conn
		gen     uint64       // p.addrGen that conn was dialed for
		since   time.Time    // when conn was established
		buf     []byte       // the writer's half of the double buffer
		wait    time.Duration
		failing bool // the last dial failed (log only transitions)
	)
	// drop closes conn; one that dies young delays the next dial.
	drop := func() {
		p.dropConn(conn)
		conn = nil
		if time.Since(since) < tcpMaxBackoff {
			wait = nextBackoff(wait)
		} else {
			wait = 0
		}
	}
	defer func() {
		if conn != nil {
			p.dropConn(conn)
		}
	}()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-p.quit:
			return
		case <-p.wake:
		}
		p.mu.Lock()
		addr, curGen, queued := p.addr, p.addrGen, p.npend
		p.mu.Unlock()
		if conn != nil && (gen != curGen || dead.Load()) {
			drop()
		}
		if queued == 0 {
			continue
		}
		if conn == nil {
			if wait > 0 {
				select {
				case <-t.ctx.Done():
					return
				case <-p.quit:
					return
				case <-time.After(wait):
				}
			}
			c, err := p.dial(addr)
			if err != nil {
				n := p.discard()
				t.dropped.Add(uint64(n))
				if !failing {
					t.log.Warn("peer unreachable; dropping its messages while retrying", "peer", p.id, "addr", addr, "err", err)
				} else {
					t.log.Debug("dial failed", "peer", p.id, "addr", addr, "err", err, "dropped", n)
				}
				failing = true
				wait = nextBackoff(wait)
				p.signal() // retry (after wait) if more gets queued
				continue
			}
			if failing {
				t.log.Info("peer reachable again", "peer", p.id, "addr", addr)
			}
			failing = false
			if !p.setConn(c) {
				_ = c.Close()
				return
			}
			conn, gen, since = c, curGen, time.Now()
			dead = new(atomic.Bool)
			t.wg.Add(1)
			go p.watch(c, dead)
		}
		var ok bool
		if buf, ok = p.flush(conn, addr, buf); !ok {
			drop()
			p.signal() // reconnect if more is queued
		}
	}
}

// flush takes what is queued for p, leaving buf (emptied) as the queue,
// and writes it to conn in one Write. It returns the buffer to swap in
// next time, and false when the write failed (its messages are counted
// dropped) and conn must be dropped.
func (p *tcpPeer) flush(conn net.Conn, addr string, buf []byte) ([]byte, bool) {
	t := p.t
	p.mu.Lock()
	buf, p.pending = p.pending, buf[:0]
	n := p.npend
	p.npend = 0
	p.mu.Unlock()
	if len(buf) == 0 {
		return buf, true
	}
	_ = conn.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
	t.writes.Add(1)
	ok := true
	if _, err := conn.Write(buf); err != nil {
		t.dropped.Add(uint64(n))
		if t.ctx.Err() == nil {
			t.log.Warn("write to peer failed; reconnecting", "peer", p.id, "addr", addr, "err", err)
		}
		ok = false
	} else {
		t.sent.Add(uint64(n))
	}
	if cap(buf) > tcpKeepBuffer {
		buf = nil // release the memory of a burst
	}
	return buf, ok
}

func nextBackoff(d time.Duration) time.Duration {
	if d <= 0 {
		return tcpMinBackoff
	}
	return min(2*d, tcpMaxBackoff)
}

// dial connects to addr, with TLS verifies that the peer is node p.id of
// the cluster, and sends the handshake.
func (p *tcpPeer) dial(addr string) (net.Conn, error) {
	t := p.t
	d := net.Dialer{Timeout: t.cfg.DialTimeout}
	c, err := d.DialContext(t.ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c = rawio.Wrap(c)
	if p.tls != nil {
		tc := tls.Client(c, p.tls)
		ctx, cancel := context.WithTimeout(t.ctx, t.cfg.DialTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	hs := appendHandshake(make([]byte, 0, 64), peerHello{id: t.cfg.Self, incarnation: t.cfg.Incarnation, cluster: t.cfg.Cluster})
	_ = c.SetWriteDeadline(time.Now().Add(t.cfg.WriteTimeout))
	if _, err := c.Write(hs); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("handshake: %w", err)
	}
	return c, nil
}

// watch reads from an outbound connection, which the peer writes to only
// to say why it refuses it (tcpRefusal and a line), so that a peer closing
// it is noticed before the next write is lost on it.
func (p *tcpPeer) watch(c net.Conn, dead *atomic.Bool) {
	defer p.t.wg.Done()
	b, _ := io.ReadAll(io.LimitReader(c, 1024))
	if reason, ok := bytes.CutPrefix(b, tcpRefusal); ok {
		p.t.log.Error("peer refused this node", "peer", p.id, "reason", string(bytes.TrimSpace(reason)))
		if f := p.t.cfg.Refused; f != nil {
			f(p.id, string(bytes.TrimSpace(reason)))
		}
	}
	_, _ = io.Copy(io.Discard, c)
	dead.Store(true)
	p.signal()
}

// setConn records the writer's connection so Close can interrupt it; false
// means the transport is closing or the peer was removed.
func (p *tcpPeer) setConn(c net.Conn) bool {
	p.t.mu.Lock()
	defer p.t.mu.Unlock()
	if p.t.closed {
		return false
	}
	select {
	case <-p.quit: // removed while dialing
		return false
	default:
	}
	p.mu.Lock()
	p.conn = c
	p.mu.Unlock()
	p.ups.Add(1)
	return true
}

func (p *tcpPeer) dropConn(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	if p.conn == c {
		p.conn = nil
		p.downs.Add(1)
	}
	p.mu.Unlock()
}

// discard empties p's queue and returns how many messages it held.
func (p *tcpPeer) discard() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.npend
	p.pending = p.pending[:0]
	if cap(p.pending) > tcpKeepBuffer {
		p.pending = nil
	}
	p.npend = 0
	return n
}
