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
	"time"

	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/paxos"
)

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	pause := 5 * time.Millisecond
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: wait (5 ms doubling to
			// 1 s) and retry, so the peer port outlives a descriptor storm.
			t.log.Error("accept failed; retrying", "err", err, "pause", pause)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		t.inbound[c] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serve(c)
	}
}

// serve reads frames from one inbound connection until it fails.
func (t *Transport) serve(c net.Conn) {
	defer t.wg.Done()
	defer func() {
		_ = c.Close()
		t.mu.Lock()
		delete(t.inbound, c)
		t.mu.Unlock()
	}()
	remote := c.RemoteAddr().String()
	_ = c.SetReadDeadline(time.Now().Add(tcpHandshakeTimeout))
	br, from, err := t.handshake(c)
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
	_ = c.SetReadDeadline(time.Time{})
	log := t.log.With("peer", from, "remote", remote)
	log.Debug("inbound connection")
	r := frameReader{br: br, max: t.cfg.MaxFrameSize}
	for {
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
			t.cfg.Handler(batch)
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
	case errors.Is(err, paxos.ErrCorrupt):
		log.Warn("peer broke framing; closing its connection", "err", err)
	default:
		log.Info("inbound connection failed", "err", err)
	}
}
