package tcpnet

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/internal/rawio"
	"github.com/paxlock/paxlock/paxos"
)

// Backoff after a failed Accept (out of descriptors, a connection aborted
// before it was taken): it doubles from acceptMinBackoff to
// acceptMaxBackoff while accepts keep failing, so that the listener
// neither spins nor stays away long once descriptors come back.
const (
	acceptMinBackoff = 5 * time.Millisecond
	acceptMaxBackoff = time.Second
)

// acceptLoop accepts inbound connections until Close; a failed Accept is
// retried after a backoff, never the end of the listener.
func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	var backoff time.Duration
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			backoff = min(max(2*backoff, acceptMinBackoff), acceptMaxBackoff)
			t.log.Error("accept failed; retrying", "err", err, "backoff", backoff)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		if !t.track(rawio.Wrap(c)) {
			return
		}
	}
}

// track takes an accepted connection into t.inbound and serves it, or
// closes it when the transport is closed (false) or it is over
// MaxInbound or MaxHandshakes (counted as refused).
func (t *Transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		_ = c.Close()
		return false
	}
	if len(t.inbound) >= t.cfg.MaxInbound {
		t.refused.Add(1) // counted before the close the dialer observes
		_ = c.Close()
		t.log.Warn("peer connection refused: too many inbound connections", "remote", c.RemoteAddr().String(), "max", t.cfg.MaxInbound)
		return true
	}
	select {
	case t.handshakes <- struct{}{}:
	default:
		t.refused.Add(1)
		_ = c.Close()
		t.log.Warn("peer connection refused: too many handshakes under way", "remote", c.RemoteAddr().String(), "max", t.cfg.MaxHandshakes)
		return true
	}
	t.inbound[c] = struct{}{}
	t.wg.Add(1)
	go t.serve(c)
	return true
}

// adopt records c as an inbound connection of peer id past its
// handshake and closes the oldest of id's others beyond MaxConnsPerPeer.
func (t *Transport) adopt(id paxos.NodeID, c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := append(t.byPeer[id], c)
	for len(cs) > t.cfg.MaxConnsPerPeer {
		_ = cs[0].Close() // its reader fails and forgets it
		t.log.Warn("peer connection closed: a newer one claims the same node", "peer", id, "max", t.cfg.MaxConnsPerPeer)
		cs = cs[1:]
	}
	t.byPeer[id] = cs
}

// forget drops c from t.inbound and from peer id's connections (id 0:
// closed before its handshake ended).
func (t *Transport) forget(id paxos.NodeID, c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.inbound, c)
	if id == 0 {
		return
	}
	cs := slices.DeleteFunc(t.byPeer[id], func(o net.Conn) bool { return o == c })
	if len(cs) == 0 {
		delete(t.byPeer, id)
	} else {
		t.byPeer[id] = cs
	}
}

// serve reads frames from one inbound connection until it fails.
func (t *Transport) serve(c net.Conn) {
	defer t.wg.Done()
	var from paxos.NodeID // set once the handshake is through
	defer func() {
		_ = c.Close()
		t.forget(from, c)
	}()
	remote := c.RemoteAddr().String()
	_ = c.SetReadDeadline(time.Now().Add(tcpHandshakeTimeout))
	br, id, err := t.handshake(c)
	<-t.handshakes
	var refusal *refusedError
	if errors.As(err, &refusal) {
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write(append(append(append([]byte(nil), tcpRefusal...), refusal.reason...), '\n'))
	}
	if err != nil {
		if t.ctx.Err() == nil {
			// Logged before it is counted: whoever sees the count (a
			// test) finds the line.
			t.log.Warn("peer connection refused", "remote", remote, "err", err)
			t.refused.Add(1)
		}
		return
	}
	from = id
	t.adopt(from, c)
	_ = c.SetReadDeadline(time.Time{})
	log := t.log.With("peer", from, "remote", remote)
	log.Debug("inbound connection")
	r := frameReader{br: br, max: t.cfg.MaxFrameSize}
	for {
		if t.cfg.IdleTimeout > 0 && !r.ready() {
			// Once per blocking read, not per message: a peer that
			// sends nothing for IdleTimeout is closed.
			_ = c.SetReadDeadline(time.Now().Add(t.cfg.IdleTimeout))
		}
		m, err := r.next()
		if err != nil {
			t.logReadError(log, err)
			return
		}
		batch := make([]paxos.Message, 0, 8)
		batch = t.admit(batch, &m, from)
		// Everything already buffered joins the same Handler call.
		for len(batch) < tcpMaxBatch && r.ready() {
			if m, err = r.next(); err != nil {
				break
			}
			batch = t.admit(batch, &m, from)
		}
		if len(batch) > 0 {
			t.received.Add(uint64(len(batch)))
			t.deliver(batch)
		}
		if err != nil {
			t.logReadError(log, err)
			return
		}
	}
}

// handshake runs the TLS handshake if TLS is on, reads the node id frame
// and, with TLS, checks that the verified certificate names that node of
// this cluster. It returns the reader of the frames that follow (through
// TLS if on) and the peer's node id.
func (t *Transport) handshake(c net.Conn) (*bufio.Reader, paxos.NodeID, error) {
	var r io.Reader = c
	var tc *tls.Conn
	if t.tlsServer != nil {
		tc = tls.Server(c, t.tlsServer)
		ctx, cancel := context.WithTimeout(t.ctx, tcpHandshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("tls handshake: %w", err)
		}
		r = tc
	}
	br := bufio.NewReaderSize(r, tcpReadBufferSize)
	hello, err := readHello(br)
	if err != nil {
		return nil, 0, err
	}
	from := hello.id
	if tc != nil {
		cs := tc.ConnectionState()
		if len(cs.PeerCertificates) == 0 { // RequireAndVerifyClientCert makes this unreachable
			return nil, 0, fmt.Errorf("%w: no client certificate", pki.ErrIdentity)
		}
		if _, err := pki.CheckNode(cs.PeerCertificates[0], t.cfg.TLS.Cluster, uint32(from)); err != nil {
			return nil, 0, fmt.Errorf("claims node %d: %w", from, err)
		}
	}
	if hello.cluster != "" && t.cfg.Cluster != "" && hello.cluster != t.cfg.Cluster {
		return nil, 0, &refusedError{fmt.Sprintf("node %d of cluster %q dialed a node of cluster %q", from, hello.cluster, t.cfg.Cluster)}
	}
	if t.cfg.Admit != nil {
		if err := t.cfg.Admit(from, hello.incarnation); err != nil {
			return nil, 0, &refusedError{fmt.Sprintf("node %d: %v", from, err)}
		}
	}
	return br, from, nil
}

// admit appends m to batch if it is addressed to this node by the peer that
// connected.
func (t *Transport) admit(batch []paxos.Message, m *paxos.Message, from paxos.NodeID) []paxos.Message {
	if m.To != t.cfg.Self || m.From != from {
		t.rejected.Add(1)
		return batch
	}
	return append(batch, *m)
}

func (t *Transport) logReadError(log *slog.Logger, err error) {
	switch {
	case t.ctx.Err() != nil:
	case errors.Is(err, io.EOF):
		log.Debug("inbound connection closed")
	case errors.Is(err, os.ErrDeadlineExceeded):
		log.Debug("inbound connection idle; closed", "idle_timeout", t.cfg.IdleTimeout)
	case errors.Is(err, paxos.ErrCorrupt):
		log.Warn("peer broke framing; closing its connection", "err", err)
	default:
		log.Info("inbound connection failed", "err", err)
	}
}
