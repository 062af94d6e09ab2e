package registry

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/paxlock/paxlock/wire"
)

// follow keeps the registry subscribed to one cluster's view: it holds one
// connection to a node at a time, moves to the next candidate when the
// connection breaks, and pauses with growing backoff after a round in
// which no node gave a view.
func (s *Standalone) follow(cl *clusterState) {
	defer s.wg.Done()
	log := s.log.With("cluster", cl.name)
	backoff := s.cfg.ReconnectMin
	last := ""
	for s.ctx.Err() == nil {
		cands := cl.candidates()
		start := 0
		if i := slices.Index(cands, last); i >= 0 {
			start = i + 1
		}
		got := false
		var errs []error
		for i := range cands {
			addr := cands[(start+i)%len(cands)]
			ok, err := s.session(cl, addr, log)
			cl.setUpstream("")
			if s.ctx.Err() != nil {
				return
			}
			if ok {
				got, last = true, addr
				log.Info("registry: lost cluster node, moving on", "node", addr, "err", err)
				break
			}
			errs = append(errs, err)
			log.Debug("registry: cluster node unavailable", "node", addr, "err", err)
		}
		wait := s.cfg.ReconnectMin
		if got {
			backoff = s.cfg.ReconnectMin
		} else {
			log.Warn("registry: no node of the cluster answered", "err", errors.Join(errs...), "retry_in", backoff)
			wait = backoff
			backoff = min(backoff*2, s.cfg.ReconnectMax)
		}
		wait = wait/2 + rand.N(wait/2+1)
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return
		}
	}
}

// upstream is the write side of a connection to a cluster node.
type upstream struct {
	nc      net.Conn
	timeout time.Duration

	mu    sync.Mutex
	codec *wire.Codec
	buf   []byte
	next  uint64
}

// write sends one request and returns its request id.
func (u *upstream) write(typ wire.Type, m wire.Message) (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.next++
	id := u.next
	b, err := u.codec.AppendFrame(u.buf[:0], typ, id, m)
	if err != nil {
		return 0, fmt.Errorf("encode %s: %w", typ, err)
	}
	u.buf = b
	_ = u.nc.SetWriteDeadline(time.Now().Add(u.timeout))
	if _, err := u.nc.Write(b); err != nil {
		return 0, fmt.Errorf("write %s: %w", typ, err)
	}
	return id, nil
}

// session follows cl at one node until the connection fails or the
// registry shuts down. It reports whether the node gave a view.
func (s *Standalone) session(cl *clusterState, addr string, log *slog.Logger) (gotView bool, err error) {
	d := net.Dialer{Timeout: s.cfg.DialTimeout}
	nc, err := d.DialContext(s.ctx, "tcp", addr)
	if err != nil {
		return false, fmt.Errorf("dial %s: %w", addr, err)
	}
	defer nc.Close()
	stop := context.AfterFunc(s.ctx, func() { nc.Close() })
	defer stop()
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	u := &upstream{nc: nc, timeout: s.cfg.RequestTimeout, codec: wire.NewCodec()}
	br := bufio.NewReaderSize(nc, 16<<10)
	rcodec := wire.NewCodec()
	maxFrame := max(s.cfg.MaxFrame, wire.DefaultMaxFrame)
	var buf []byte

	if cl.hello != nil {
		id, err := u.write(wire.TypeHello, cl.hello)
		if err != nil {
			return false, fmt.Errorf("%s: %w", addr, err)
		}
		for {
			_ = nc.SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
			var f wire.Frame
			f, buf, err = wire.ReadFrame(br, buf, maxFrame)
			if err != nil {
				return false, fmt.Errorf("hello to %s: %w", addr, err)
			}
			if f.Type != wire.TypeResponse || f.ReqID != id {
				continue
			}
			var r wire.Response
			if err := rcodec.DecodeInto(f.Body, &r); err != nil {
				return false, fmt.Errorf("hello to %s: %w", addr, err)
			}
			if r.Status != wire.StatusSuccess {
				return false, fmt.Errorf("hello to %s: %s %s", addr, r.Status, r.Msg)
			}
			break
		}
	}

	subID, err := u.write(wire.TypeSubscribeView, &wire.SubscribeView{})
	if err != nil {
		return false, fmt.Errorf("%s: %w", addr, err)
	}
	hbDone := make(chan struct{})
	defer close(hbDone)
	go func() {
		t := time.NewTicker(s.cfg.HeartbeatInterval)
		defer t.Stop()
		for {
			select {
			case <-hbDone:
				return
			case <-t.C:
				if _, err := u.write(wire.TypeHeartbeat, &wire.Heartbeat{}); err != nil {
					nc.Close()
					return
				}
			}
		}
	}()

	for {
		// Heartbeats keep replies coming: silence this long means the node
		// or the path to it is gone.
		_ = nc.SetReadDeadline(time.Now().Add(s.cfg.HeartbeatInterval + s.cfg.RequestTimeout))
		var f wire.Frame
		f, buf, err = wire.ReadFrame(br, buf, maxFrame)
		if err != nil {
			return gotView, fmt.Errorf("read from %s: %w", addr, err)
		}
		switch f.Type {
		case wire.TypeView, wire.TypeViewChanged:
			v := new(wire.View)
			if err := rcodec.DecodeInto(f.Body, v); err != nil {
				log.Warn("registry: undecodable view from cluster node", "node", addr, "err", err)
				continue
			}
			if f.Type == wire.TypeView && f.ReqID == subID {
				cl.setUpstream(addr)
				log.Info("registry: following cluster node", "node", addr, "version", v.Version)
			}
			gotView = true
			cl.update(v, log)
		case wire.TypeResponse:
			var r wire.Response
			if err := rcodec.DecodeInto(f.Body, &r); err != nil {
				log.Warn("registry: undecodable response from cluster node", "node", addr, "err", err)
				continue
			}
			if f.ReqID == subID {
				return false, fmt.Errorf("subscribe at %s: %s %s", addr, r.Status, r.Msg)
			}
			// A heartbeat's reply: a newer version than ours means a push
			// was missed; fetch the view.
			if r.Status == wire.StatusSuccess && r.ViewVersion > cl.version() {
				if _, err := u.write(wire.TypeGetView, &wire.GetView{}); err != nil {
					return gotView, fmt.Errorf("%s: %w", addr, err)
				}
			}
		}
	}
}
