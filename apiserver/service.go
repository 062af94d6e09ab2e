package apiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/api/paxlock/v1/paxlockv1connect"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// Node is what the service needs of its node (*server.Server has it).
type Node interface {
	// ServeLocal serves nc as one of the node's client connections,
	// vouching that its caller's certificate names certNamespaces.
	ServeLocal(nc net.Conn, certNamespaces []string) error
	// Verifier is a namespace's SCRAM verifier; false if it does not
	// exist.
	Verifier(ns string) (scramauth.Verifier, bool)
	// BindsNamespaces reports client_tls bind_namespace.
	BindsNamespaces() bool
}

// Options configure a Service.
type Options struct {
	// Log is where the service logs (default slog.Default()).
	Log *slog.Logger
	// MaxDrift is the clock-rate margin validity_ms leaves (default
	// 0.01, the node's max_drift default).
	MaxDrift float64
	// MaxConns bounds the listener's HTTP connections (Listen; default
	// 10000, as the node's max_conns).
	MaxConns int
}

// maxRequestBytes bounds a request's body, as the node's default
// max_frame bounds a native request: the largest request (64 keys and
// a holder value) needs a fraction of it.
const maxRequestBytes = 1 << 20

// compressMinBytes is the smallest answer the service would compress for
// a caller that accepts gzip: a lock call's answer is tens of bytes, which
// gzip makes no smaller, and setting up a gzip writer per answer would
// cost the node more CPU than the rest of the call (docs/api.md, Cost).
// Every answer in protobuf is under it, so the service drops a protobuf
// caller's offer of answer encodings before Connect reads it
// (uncompressedAnswers).
const compressMinBytes = 4 << 10

// retryFor bounds how long a call keeps re-sending a request that found
// its group between masters (NO_MASTER, a redirect, a namespace moving)
// before it answers UNAVAILABLE.
const retryFor = 10 * time.Second

// Service implements paxlockv1connect.LockServiceHandler over a node.
type Service struct {
	node  Node
	log   *slog.Logger
	drift float64
	auth  *authCache
	// nodeID is the node's id as the routing hints say it ("" when the
	// node does not tell it: no hints).
	nodeID string

	life context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	sessions map[laneKey][]*nsSession // each lane's, lanes.go
	bounds   connBounds
	holds    map[string]*nsHolds // by namespace
}

var _ paxlockv1connect.LockServiceHandler = (*Service)(nil)

// New returns the service of node.
func New(node Node, o Options) *Service {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MaxDrift <= 0 {
		o.MaxDrift = 0.01
	}
	s := &Service{node: node, log: o.Log, drift: o.MaxDrift, auth: newAuthCache(), nodeID: nodeIDOf(node), sessions: make(map[laneKey][]*nsSession), holds: make(map[string]*nsHolds), bounds: boundsOf(node)}
	s.life, s.stop = context.WithCancel(context.Background())
	return s
}

// Handler returns the service's HTTP path prefix and handler.
func (s *Service) Handler() (string, http.Handler) {
	path, h := paxlockv1connect.NewLockServiceHandler(s, connect.WithReadMaxBytes(maxRequestBytes),
		connect.WithCompressMinBytes(compressMinBytes))
	return path, uncompressedAnswers(withCaller(h))
}

// acceptHeaders are the request headers in which a caller offers the
// answer encodings it accepts: the Connect protocol's unary and
// streaming ones, gRPC's and gRPC-Web's.
var acceptHeaders = []string{"Accept-Encoding", "Connect-Accept-Encoding", "Grpc-Accept-Encoding"}

// uncompressedAnswers serves h with the accept headers of protobuf
// callers removed: every answer in protobuf is under compressMinBytes
// (TestLargestAnswersUnderCompressMin), so none would be compressed, and
// Connect's parsing of the offer for each call (a split of the header
// into a new slice) is a few percent of a node's CPU under API load. A
// JSON caller keeps its offer: JSON escaping can take an answer about a
// key of control characters past compressMinBytes. A compressed request
// is read as before (its Content-Encoding).
func uncompressedAnswers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header["Content-Type"]; len(ct) == 0 || !strings.Contains(ct[0], "json") {
			for _, k := range acceptHeaders {
				delete(r.Header, k)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Close ends the service's sessions into the node: calls under way are
// answered UNAVAILABLE, and no session opens again.
func (s *Service) Close() {
	s.stop()
	s.mu.Lock()
	lanes := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	for _, ss := range lanes {
		for _, x := range ss {
			<-x.ready
			if x.sc != nil {
				x.sc.Close(errors.New("api service closed"))
			}
		}
	}
}

// open authenticates ctx's caller and returns its namespace's session
// for calls about key (its lane, lanes.go), opening it if needed, with u
// counted on it: the caller gives a wait or a watch back
// (nsSession.giveBack) when it ends, also on an error after open.
func (s *Service) open(ctx context.Context, key string, u use) (*nsSession, error) {
	c, err := s.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	lane := s.laneOf(c.ns, key)
	s.mu.Lock()
	if s.sessions == nil {
		s.mu.Unlock()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("api service closed"))
	}
	ss := s.pickLocked(lane, u)
	if ss == nil {
		h := s.holds[c.ns]
		if h == nil {
			h = newHolds()
			s.holds[c.ns] = h
		}
		ss = newSession(lane, h)
		ss.take(u)
		s.sessions[lane] = append(s.sessions[lane], ss)
		var certNS []string
		if s.node.BindsNamespaces() {
			certNS = []string{c.ns} // authenticate checked the caller's certificate
		}
		go ss.open(s.life, s.node, c.secret, certNS)
	}
	s.mu.Unlock()
	select {
	case <-ss.ready:
	case <-ctx.Done():
		ss.giveBack(u)
		return nil, ctxErr(ctx)
	}
	if ss.err != nil {
		ss.giveBack(u)
		s.forget(ss)
		return nil, ss.openErr()
	}
	return ss, nil
}

// forget drops ss from its lane's sessions if it is still there.
func (s *Service) forget(ss *nsSession) {
	s.mu.Lock()
	s.dropLocked(ss.lane, ss)
	s.mu.Unlock()
}

// routed sends a request about one key and returns its answer, sending
// it again while the key's group is between masters, for up to retryFor
// within ctx. The request carries wire.ForwardNow, so a node that is
// not the group's master forwards it there.
func (s *Service) routed(ctx context.Context, ss *nsSession, typ wire.Type, m wire.Routed) (*wire.Response, error) {
	m.SetRedirectCount(wire.ForwardNow)
	deadline := time.Now().Add(retryFor)
	for n := 0; ; n++ {
		r, err := ss.call(ctx, typ, m)
		if err != nil {
			return nil, err
		}
		s.setHint(ctx, ss, m.RoutingKey())
		switch r.Status {
		case wire.StatusNoMaster, wire.StatusMasterRedirect, wire.StatusMoving:
		default:
			return r, nil
		}
		wait := time.Duration(max(r.RetryAfterMs, 10)) * time.Millisecond
		wait = min(wait<<min(n, 5), time.Second)
		if time.Now().Add(wait).After(deadline) {
			return r, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctxErr(ctx)
		}
	}
}

// Renew implements paxlockv1connect.LockServiceHandler.
func (s *Service) Renew(ctx context.Context, req *connect.Request[paxlockv1.RenewRequest]) (*connect.Response[paxlockv1.RenewResponse], error) {
	ss, err := s.open(ctx, req.Msg.Key, useCall)
	if err != nil {
		return nil, err
	}
	q := req.Msg
	if q.Owner == "" {
		return nil, invalid("renew: empty owner")
	}
	m := &wire.Renew{Key: q.Key, Owner: ownerOf(ss.client, q.Owner), Token: q.Token, TTLMs: q.TtlMs, SetValue: q.SetValue, Value: string(q.Value)}
	if err := m.Validate(); err != nil {
		return nil, invalid("renew: " + err.Error())
	}
	r, err := s.routed(ctx, ss, wire.TypeRenew, m)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusSuccess {
		return nil, statusError("renew", q.Key, r)
	}
	ttl := r.TTLLeftMs
	if q.TtlMs != 0 && (ttl == 0 || q.TtlMs < ttl) {
		ttl = q.TtlMs
	}
	return connect.NewResponse(&paxlockv1.RenewResponse{TtlMs: ttl, ValidityMs: validityMs(ttl, s.drift)}), nil
}

// Release implements paxlockv1connect.LockServiceHandler.
func (s *Service) Release(ctx context.Context, req *connect.Request[paxlockv1.ReleaseRequest]) (*connect.Response[paxlockv1.ReleaseResponse], error) {
	ss, err := s.open(ctx, req.Msg.Key, useCall)
	if err != nil {
		return nil, err
	}
	q := req.Msg
	if q.Owner == "" {
		return nil, invalid("release: empty owner")
	}
	m := &wire.Release{Key: q.Key, Owner: ownerOf(ss.client, q.Owner), Token: q.Token, KeepPermits: q.KeepPermits, Trace: traceOf(req.Header())}
	if err := m.Validate(); err != nil {
		return nil, invalid("release: " + err.Error())
	}
	r, err := s.routed(ctx, ss, wire.TypeRelease, m)
	if err != nil {
		return nil, err
	}
	if r.Status != wire.StatusSuccess {
		return nil, statusError("release", q.Key, r)
	}
	if q.KeepPermits != 0 && r.Permits != q.KeepPermits {
		// A master that predates partial releases released the whole
		// hold: the caller must not count the permits it meant to keep.
		return nil, apiError(connect.CodeNotFound, wire.StatusLockDeleted.String(),
			fmt.Errorf("release %q: the master released the whole hold (it predates partial releases)", q.Key))
	}
	return connect.NewResponse(&paxlockv1.ReleaseResponse{Permits: r.Permits}), nil
}

// State implements paxlockv1connect.LockServiceHandler.
func (s *Service) State(ctx context.Context, req *connect.Request[paxlockv1.StateRequest]) (*connect.Response[paxlockv1.StateResponse], error) {
	r, ss, err := s.state(ctx, req.Msg.Key, 0)
	if err != nil {
		return nil, err
	}
	var owner wire.Owner
	if req.Msg.Owner != "" {
		owner = ownerOf(ss.client, req.Msg.Owner)
	}
	return connect.NewResponse(&paxlockv1.StateResponse{State: lockState(r, owner)}), nil
}

// CheckToken implements paxlockv1connect.LockServiceHandler.
func (s *Service) CheckToken(ctx context.Context, req *connect.Request[paxlockv1.CheckTokenRequest]) (*connect.Response[paxlockv1.CheckTokenResponse], error) {
	if _, err := s.authenticate(ctx); err != nil {
		return nil, err
	}
	if req.Msg.Token == 0 {
		return nil, invalid("check token: token 0 is never granted")
	}
	r, _, err := s.state(ctx, req.Msg.Key, req.Msg.Token)
	if err != nil {
		return nil, err
	}
	current := r.Status == wire.StatusSuccess && r.Token == req.Msg.Token && r.TTLLeftMs > 0
	return connect.NewResponse(&paxlockv1.CheckTokenResponse{Current: current, State: lockState(r, wire.Owner{})}), nil
}

// state asks key's master for its state (with token: a token check),
// over the session it returns; a read, sent again over a fresh session
// if its session ends under it (readOnly).
func (s *Service) state(ctx context.Context, key string, token uint64) (*wire.Response, *nsSession, error) {
	m := &wire.State{Key: key, Token: token}
	if err := m.Validate(); err != nil {
		return nil, nil, invalid("state: " + err.Error())
	}
	r, ss, err := s.readOnly(ctx, key, wire.TypeState, m)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != wire.StatusSuccess && r.Status != wire.StatusLockDeleted {
		return nil, nil, statusError("state", key, r)
	}
	return r, ss, nil
}

// invalid is an INVALID_ARGUMENT error with msg.
func invalid(msg string) error {
	return apiError(connect.CodeInvalidArgument, wire.StatusBadRequest.String(), errors.New(msg))
}
