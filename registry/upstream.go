package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/client/wire"
)

// follow keeps the registry subscribed to one cluster's view: it holds one
// connection to a node at a time, moves to the next candidate when the
// connection breaks, and pauses with growing backoff after a round in
// which no node gave a view.
func (s *Standalone) follow(cl *clusterState) {
	defer s.wg.Done()
	ctx := cl.ctx
	log := s.log.With("cluster", cl.name)
	backoff := s.cfg.ReconnectMin
	last := ""
	for ctx.Err() == nil {
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
			if ctx.Err() != nil {
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
		case <-ctx.Done():
			return
		}
	}
}

// session follows cl at one node until the connection fails or the
// registry shuts down. It reports whether the node gave a view.
//
// The connection is a session (package session): dial, the optional
// upstream handshake, a Heartbeat whenever it has been quiet for
// HeartbeatInterval, and an end when nothing answers within RequestTimeout
// of one.
func (s *Standalone) session(cl *clusterState, addr string, log *slog.Logger) (gotView bool, err error) {
	cfg := session.Config{
		DialTimeout:       s.cfg.DialTimeout,
		HandshakeTimeout:  s.cfg.RequestTimeout,
		MaxFrame:          max(s.cfg.MaxFrame, wire.DefaultMaxFrame),
		HeartbeatInterval: s.cfg.HeartbeatInterval,
		HeartbeatTimeout:  s.cfg.RequestTimeout,
		WriteTimeout:      s.cfg.RequestTimeout,
	}
	if cl.auth != nil {
		cfg.Handshake = session.SCRAM(*cl.auth, cl.authSecret)
	}
	sc, _, err := session.Dial(cl.ctx, addr, cfg)
	if err != nil {
		return false, err
	}
	stop := context.AfterFunc(cl.ctx, func() { sc.Close(cl.ctx.Err()) })
	defer stop()
	u := &upstream{cl: cl, addr: addr, log: log, sc: sc, next: 1}
	u.subID = u.nextID()
	if err := sc.Append(wire.TypeSubscribeView, u.subID, &wire.SubscribeView{}); err != nil {
		sc.Close(err)
		return false, fmt.Errorf("%s: %w", addr, err)
	}
	err = sc.Run(u)
	if u.refused != nil {
		return false, u.refused
	}
	return u.gotView, fmt.Errorf("%s: %w", addr, err)
}

// upstream is the registry's side of one session with a cluster node: it
// subscribes to the node's view and feeds what comes to the cluster's
// state. Its methods run on the session's reader.
type upstream struct {
	cl    *clusterState
	addr  string
	log   *slog.Logger
	sc    *session.Conn
	codec wire.Codec

	next    uint64 // the last request id used (the Hello's is 1)
	subID   uint64
	gotView bool
	refused error // the node refused the subscription
}

func (u *upstream) nextID() uint64 {
	u.next++
	return u.next
}

// Frame implements session.Handler: views (the subscription's reply, the
// pushes, a GetView's reply) update the cluster's state.
func (u *upstream) Frame(f wire.Frame, _ []byte) {
	switch f.Type {
	case wire.TypeView, wire.TypeViewChanged:
		v := new(wire.View)
		if err := u.codec.DecodeInto(f.Body, v); err != nil {
			u.log.Warn("registry: undecodable view from cluster node", "node", u.addr, "err", err)
			return
		}
		if f.Type == wire.TypeView && f.ReqID == u.subID {
			u.cl.setUpstream(u.addr)
			u.log.Info("registry: following cluster node", "node", u.addr, "version", v.Version)
		}
		u.gotView = true
		u.cl.update(v, u.log)
	case wire.TypeResponse:
		if f.ReqID != u.subID {
			return
		}
		var r wire.Response
		if err := u.codec.DecodeInto(f.Body, &r); err != nil {
			u.log.Warn("registry: undecodable response from cluster node", "node", u.addr, "err", err)
			return
		}
		u.refused = fmt.Errorf("subscribe at %s: %s %s", u.addr, r.Status, r.Msg)
		u.sc.Close(u.refused)
	}
}

// Heartbeat implements session.Handler: a newer version than the cached
// view's means a push was missed; fetch the view.
func (u *upstream) Heartbeat(r *wire.Response) {
	if r.Status == wire.StatusSuccess && r.ViewVersion > u.cl.version() {
		if err := u.sc.Append(wire.TypeGetView, u.nextID(), &wire.GetView{}); err != nil {
			u.sc.Close(err)
		}
	}
}

// Closed implements session.Handler; session returns the cause.
func (u *upstream) Closed(error) {}
