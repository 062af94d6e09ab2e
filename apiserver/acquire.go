package apiserver

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// abandonTimeout bounds leaving the queue for a blocking acquire whose
// caller went away: the CancelWait, and the Release of a grant that won
// the race.
const abandonTimeout = 5 * time.Second

// Acquire implements paxlockv1connect.LockServiceHandler.
func (s *Service) Acquire(ctx context.Context, req *connect.Request[paxlockv1.AcquireRequest]) (*connect.Response[paxlockv1.AcquireResponse], error) {
	u := useCall
	if req.Msg.WaitMs != 0 {
		u = useWait // a blocking acquire (acquireOf)
	}
	ss, err := s.open(ctx, req.Msg.Key, u)
	if err != nil {
		return nil, err
	}
	defer ss.giveBack(u)
	m, err := acquireOf(ss, req.Msg)
	if err != nil {
		return nil, err
	}
	m.Trace = traceOf(req.Header())
	start := time.Now()
	var grants chan wire.Granted
	if m.Blocking() {
		grants = ss.addWait(m.WaitID)
		defer ss.dropWait(m.WaitID)
	}
	for {
		r, err := s.routed(ctx, ss, wire.TypeAcquire, m)
		if err != nil {
			if grants != nil {
				s.abandon(ss, m, grants)
			}
			return nil, err
		}
		switch r.Status {
		case wire.StatusSuccess:
			return s.granted(start, false, r.Token, ttlOf(m.TTLMs, r.TTLLeftMs), 0), nil
		case wire.StatusLockWait:
		default:
			return nil, statusError("acquire", m.Key, r)
		}
		g, err := s.awaitGrant(ctx, ss, m, grants)
		if err != nil {
			return nil, err
		}
		switch g.Status {
		case wire.StatusSuccess:
			return s.confirm(ctx, ss, m, start, g)
		case wire.StatusTimeout:
			return nil, apiError(connect.CodeDeadlineExceeded, wire.StatusTimeout.String(), fmt.Errorf("acquire %q: wait_ms ran out", m.Key))
		case wire.StatusNoMaster, wire.StatusMoving:
			// The wait left the queue (a master change): send it again,
			// keeping its place (WaitedMs).
			m.WaitedMs = uint32(time.Since(start) / time.Millisecond)
		default:
			return nil, statusError("acquire", m.Key, &wire.Response{Status: g.Status})
		}
	}
}

// acquireOf is the wire Acquire of an API request (a blocking one gets a
// random wait id: wait ids must be unique within the client id, which
// every node's session of the namespace shares).
func acquireOf(ss *nsSession, q *paxlockv1.AcquireRequest) (*wire.Acquire, error) {
	if q.Owner == "" {
		return nil, invalid("acquire: empty owner")
	}
	kind, ok := kindOf(q.Kind)
	if !ok {
		return nil, invalid(fmt.Sprintf("acquire: unknown kind %d", q.Kind))
	}
	if q.Weight > wire.MaxWeight {
		return nil, invalid(fmt.Sprintf("acquire: weight %d above %d", q.Weight, wire.MaxWeight))
	}
	weight := uint8(q.Weight)
	if weight == 0 {
		weight = wire.DefaultWeight
	}
	m := &wire.Acquire{Key: q.Key, Owner: ownerOf(ss.client, q.Owner), Kind: kind, Weight: weight,
		TTLMs: q.TtlMs, Value: string(q.Value), Permits: q.Permits, Limit: q.Limit, LockDelayMs: q.LockDelayMs, MaxHoldMs: q.MaxHoldMs}
	if q.Downgrade {
		m.Flags |= wire.FlagDowngrade
	}
	if q.SetLimit {
		m.Flags |= wire.FlagSetPermits
	}
	switch {
	case q.WaitMs < 0:
		m.MaxWaitMs = wire.WaitForever
	case q.WaitMs > 0:
		m.MaxWaitMs = uint32(q.WaitMs)
	}
	if m.Blocking() {
		m.WaitID = rand.Uint64() | 1
	}
	if err := m.Validate(); err != nil {
		return nil, invalid("acquire: " + err.Error())
	}
	return m, nil
}

// awaitGrant waits for the Granted push of blocking acquire m; when ctx
// ends first, the wait is abandoned (abandon).
func (s *Service) awaitGrant(ctx context.Context, ss *nsSession, m *wire.Acquire, grants chan wire.Granted) (wire.Granted, error) {
	select {
	case g := <-grants:
		return g, nil
	case <-ss.sc.Done():
		return wire.Granted{}, connect.NewError(connect.CodeUnavailable, errSessionLost)
	case <-ctx.Done():
		s.abandon(ss, m, grants)
		return wire.Granted{}, ctxErr(ctx)
	}
}

// abandon takes blocking acquire m out of the queue for a caller that
// went away, in the background: a CancelWait, and a Release of the hold
// if the grant won the race (its push, or the CancelWait's answer, names
// the token), so that no hold outlives a caller that never learnt of it.
func (s *Service) abandon(ss *nsSession, m *wire.Acquire, grants chan wire.Granted) {
	go func() {
		ctx, cancel := context.WithTimeout(s.life, abandonTimeout)
		defer cancel()
		var token uint64
		select {
		case g := <-grants:
			if g.Status == wire.StatusSuccess {
				token = g.Token
			}
		default:
			cw := &wire.CancelWait{Key: m.Key, Owner: m.Owner, WaitID: m.WaitID}
			if r, err := s.routed(ctx, ss, wire.TypeCancelWait, cw); err == nil && r.Status == wire.StatusSuccess {
				token = r.Token
			}
		}
		if token != 0 {
			_, _ = s.routed(ctx, ss, wire.TypeRelease, &wire.Release{Key: m.Key, Owner: m.Owner, Token: token})
		}
	}()
}

// confirm answers a blocking acquire's grant. The hold's deadline on the
// master counts from when it applied the grant, after the caller's send,
// so counting validity from the send is safe; a grant that comes late
// (after a third of the validity) is confirmed with a Renew first, and
// validity then counts from the Renew's send, which is waited time after
// the caller's (drift margin applied to both).
func (s *Service) confirm(ctx context.Context, ss *nsSession, m *wire.Acquire, start time.Time, g wire.Granted) (*connect.Response[paxlockv1.AcquireResponse], error) {
	ttl := ttlOf(m.TTLMs, g.TTLMs)
	waited := time.Since(start)
	if waited < time.Duration(validityMs(ttl, s.drift))*time.Millisecond/3 {
		return s.granted(start, true, g.Token, ttl, 0), nil
	}
	renewSent := time.Since(start)
	r, err := s.routed(ctx, ss, wire.TypeRenew, &wire.Renew{Key: m.Key, Owner: m.Owner, Token: g.Token, TTLMs: ttl})
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusSuccess {
		return nil, statusError("acquire (confirming a late grant)", m.Key, r)
	}
	return s.granted(start, true, g.Token, ttlOf(ttl, r.TTLLeftMs), renewSent), nil
}

// granted is the answer to an acquire sent at start (on this node's
// clock) and granted with token for ttlMs; the hold's deadline on the
// master is at least from after the caller's send plus since (a
// confirming Renew's send).
func (s *Service) granted(start time.Time, waited bool, token uint64, ttlMs uint32, since time.Duration) *connect.Response[paxlockv1.AcquireResponse] {
	resp := &paxlockv1.AcquireResponse{Token: token, TtlMs: ttlMs}
	resp.ValidityMs = validityMs(ttlMs+uint32(since/time.Millisecond), s.drift)
	if waited {
		resp.WaitedMs = uint32(time.Since(start) / time.Millisecond)
	}
	return connect.NewResponse(resp)
}

// ttlOf is the TTL a grant is counted with: the one the master says it
// applied, never more than asked (0: the server's default, unknown here).
func ttlOf(asked, applied uint32) uint32 {
	if asked != 0 && (applied == 0 || asked < applied) {
		return asked
	}
	return applied
}

// MultiAcquire implements paxlockv1connect.LockServiceHandler.
func (s *Service) MultiAcquire(ctx context.Context, req *connect.Request[paxlockv1.MultiAcquireRequest]) (*connect.Response[paxlockv1.MultiAcquireResponse], error) {
	var key string // the keys share a group (the node refuses others), so the first names the lane
	if len(req.Msg.Keys) > 0 {
		key = req.Msg.Keys[0]
	}
	ss, err := s.open(ctx, key, useCall)
	if err != nil {
		return nil, err
	}
	q := req.Msg
	if q.Owner == "" {
		return nil, invalid("multi-acquire: empty owner")
	}
	o := ownerOf(ss.client, q.Owner)
	ids := make([]uint64, len(q.Keys))
	for i := range ids {
		ids[i] = o.ID
	}
	m := &wire.MultiAcquire{Client: ss.client, Keys: q.Keys, IDs: ids, TTLMs: q.TtlMs, Value: string(q.Value)}
	if err := m.Validate(); err != nil {
		return nil, invalid("multi-acquire: " + err.Error())
	}
	r, err := s.routed(ctx, ss, wire.TypeMultiAcquire, m)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusSuccess {
		key := ""
		if int(r.KeyIndex) < len(q.Keys) {
			key = q.Keys[r.KeyIndex]
		}
		return nil, statusError("multi-acquire", key, r)
	}
	if len(r.Tokens) != len(q.Keys) {
		return nil, connect.NewError(connect.CodeInternal, errors.New("multi-acquire: answer without a token per key"))
	}
	ttl := ttlOf(q.TtlMs, r.TTLLeftMs)
	return connect.NewResponse(&paxlockv1.MultiAcquireResponse{Tokens: r.Tokens, TtlMs: ttl, ValidityMs: validityMs(ttl, s.drift)}), nil
}
