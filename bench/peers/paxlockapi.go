package peers

// The paxlock-api adapter: the nodes' Connect API (api/paxlock/v1,
// docs/api.md) through its generated Go client, used as an application
// in another language would use the API, on the cluster the paxlock
// adapter measures.
//
//   - One HTTP/2 connection per node, shared by all workers, as the native
//     client keeps one multiplexed connection per node. A call for a key
//     goes to the node the answers' routing hints name as the master of
//     the key's group (paxlockapiroute.go), else to node worker mod nodes,
//     which forwards it over its relay when it is not the master; with
//     Config.PaxlockAPINoRoute every call goes to node worker mod nodes
//     (two calls in three relayed, with three nodes).
//   - Acquire is a blocking Acquire whose wait_ms is what is left of the
//     harness's deadline: the wait happens in the master's queue and ends
//     with the grant, never by polling. Every acquire names a new owner
//     string, as every native acquire makes a new handle.
//   - Renew and Release name the owner and the fencing token.
//   - Protocol: the Connect protocol with binary protobuf bodies by
//     default, gRPC with Config.PaxlockAPIGRPC. TLS with the cluster's CA
//     where Config.PaxlockCA exists, else HTTP/2 without TLS (h2c).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/api/paxlock/v1/paxlockv1connect"
	"github.com/paxlock/paxlock/bench/load"
)

type paxlockAPILocker struct {
	nodes []paxlockv1connect.LockServiceClient
	trs   []*http.Transport
	route *apiRouter // nil: no routing
	grpc  bool
	tls   bool
	// owners numbers the owner strings of this run's acquires; run keeps
	// them apart from an earlier run's on the same cluster.
	owners atomic.Uint64
	run    string
}

// OpenPaxlockAPI connects to the API of every node in cfg.PaxlockAPI and
// checks on each that a lock can be taken and released.
func OpenPaxlockAPI(ctx context.Context, cfg Config) (load.Locker, error) {
	if len(cfg.PaxlockAPI) == 0 {
		return nil, errors.New("paxlock-api: no API addresses")
	}
	scheme, tc, err := apiTLS(cfg.PaxlockCA)
	if err != nil {
		return nil, err
	}
	p := &paxlockAPILocker{grpc: cfg.PaxlockAPIGRPC, tls: tc != nil, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	if !cfg.PaxlockAPINoRoute {
		p.route = &apiRouter{ns: cfg.PaxlockNamespace, byID: make(map[uint32]int)}
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.PaxlockNamespace+":"+cfg.PaxlockSecret))
	opts := []connect.ClientOption{connect.WithInterceptors(basicAuth(auth))}
	if p.grpc {
		opts = append(opts, connect.WithGRPC())
	}
	for _, addr := range cfg.PaxlockAPI {
		tr := &http.Transport{TLSClientConfig: tc, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}
		tr.Protocols = new(http.Protocols)
		if tc != nil {
			tr.Protocols.SetHTTP2(true)
		} else {
			tr.Protocols.SetUnencryptedHTTP2(true)
		}
		p.trs = append(p.trs, tr)
		p.nodes = append(p.nodes, paxlockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, scheme+"://"+addr, opts...))
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for i := range p.nodes {
		if err := p.ping(octx, i); err != nil {
			_ = p.Close()
			return nil, fmt.Errorf("paxlock-api at %s (%s), namespace %q: %w (is it running? make run, or bench/scripts/paxlock.sh start)",
				cfg.PaxlockAPI[i], scheme, cfg.PaxlockNamespace, err)
		}
	}
	return p, nil
}

// apiTLS is the scheme and TLS configuration for the nodes' API: TLS 1.3
// verified against the CA in caFile where it exists (a secure cluster
// writes it), else plaintext.
func apiTLS(caFile string) (string, *tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if errors.Is(err, os.ErrNotExist) || caFile == "" {
		return "http", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("paxlock-api: the cluster's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return "", nil, fmt.Errorf("paxlock-api: no certificate in %s", caFile)
	}
	return "https", &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// basicAuth sets the namespace's credentials on every call.
func basicAuth(value string) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", value)
			return next(ctx, req)
		}
	}
}

// ping takes and releases a throw-away lock through n: the node answers,
// the credentials are good and the key's group has a master.
func (p *paxlockAPILocker) ping(ctx context.Context, i int) error {
	n := p.nodes[i]
	key, owner := "pxb/api-ping/"+p.run, p.owner()
	a, err := n.Acquire(ctx, connect.NewRequest(&paxlockv1.AcquireRequest{Key: key, Owner: owner, TtlMs: 5000}))
	if err != nil {
		return fmt.Errorf("test lock: %w", err)
	}
	if p.route != nil {
		p.route.identify(i, a.Header())
		p.route.learn(a.Header())
	}
	if _, err := n.Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: key, Owner: owner, Token: a.Msg.Token})); err != nil {
		return fmt.Errorf("test unlock: %w", err)
	}
	return nil
}

func (p *paxlockAPILocker) owner() string {
	return p.run + "-" + strconv.FormatUint(p.owners.Add(1), 36)
}

func (p *paxlockAPILocker) Name() string { return "paxlock-api" }

// Display is the same whichever protocol the run speaks, as the report
// names the system where it did not run; Caps' notes say which.
func (p *paxlockAPILocker) Display() string { return "paxlock (API)" }

func (p *paxlockAPILocker) protocol() string {
	proto := "Connect protocol, binary protobuf"
	if p.grpc {
		proto = "gRPC"
	}
	if p.tls {
		return proto + ", HTTP/2 over TLS 1.3"
	}
	return proto + ", HTTP/2 without TLS (h2c)"
}

func (p *paxlockAPILocker) Caps() load.Caps {
	return load.Caps{
		Renew:     true,
		ReadWrite: true,
		Fencing:   true,
		Wait:      "server-side queue, push (a blocking Acquire with wait_ms)",
		// The API's calls are the native protocol's requests on the node:
		// the same commands.
		CommandsPerLock:  2,
		CommandsPerRenew: 1,
		Notes: []string{
			fmt.Sprintf("the paxlock cluster through its nodes' Connect API (%s)", p.protocol()),
			fmt.Sprintf("one HTTP/2 connection per node (%d), shared by all workers; %s", len(p.nodes), p.routing()),
			"a new owner string per acquire; acquire = Acquire with wait_ms = the deadline; release = Release with the token",
		},
	}
}

// Version reports the build the cluster runs: the API carries no server
// version either (see paxlockLocker.Version).
func (p *paxlockAPILocker) Version(context.Context) (string, error) {
	return repoVersion(), nil
}

// routing says where the calls go, for the notes.
func (p *paxlockAPILocker) routing() string {
	if p.route == nil {
		return fmt.Sprintf("worker i calls node i mod %d, which forwards to the key's master when it is not", len(p.nodes))
	}
	return "a call goes to the node the answers' routing hints name as the key's master (else node worker mod nodes, which forwards)"
}

func (p *paxlockAPILocker) NewSession(_ context.Context, worker int) (load.Session, error) {
	return &paxlockAPISession{p: p, home: worker % len(p.nodes)}, nil
}

func (p *paxlockAPILocker) Close() error {
	for _, tr := range p.trs {
		tr.CloseIdleConnections()
	}
	return nil
}

type paxlockAPISession struct {
	p    *paxlockAPILocker
	home int // the node called where no hint says better
}

// node is the client of the node to call for key.
func (s *paxlockAPISession) node(key string) paxlockv1connect.LockServiceClient {
	return s.p.nodes[s.p.route.pick(key, s.home)]
}

// learn takes the routing hints of an answer (resp's headers, or err's
// metadata).
func (s *paxlockAPISession) learn(h http.Header, err error) {
	if s.p.route == nil {
		return
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		h = ce.Meta()
	}
	if h != nil {
		s.p.route.learn(h)
	}
}

// apiHold is a lease's handle: who holds it.
type apiHold struct{ owner string }

func (s *paxlockAPISession) Acquire(ctx context.Context, req load.Request) (load.Lease, error) {
	kind := paxlockv1.LockKind_LOCK_KIND_EXCLUSIVE
	switch req.Mode {
	case load.Exclusive:
	case load.Write:
		kind = paxlockv1.LockKind_LOCK_KIND_WRITE
	case load.Read:
		kind = paxlockv1.LockKind_LOCK_KIND_READ
	default:
		return load.Lease{}, load.ErrUnsupported
	}
	h := &apiHold{owner: s.p.owner()}
	a, err := s.node(req.Key).Acquire(ctx, connect.NewRequest(&paxlockv1.AcquireRequest{
		Key: req.Key, Owner: h.owner, TtlMs: durMs(req.TTL), WaitMs: waitMs(ctx), Kind: kind,
	}))
	if err != nil {
		s.learn(nil, err)
		return load.Lease{}, apiErr(ctx, atDeadline(ctx, err))
	}
	s.learn(a.Header(), nil)
	return load.Lease{Key: req.Key, Mode: req.Mode, Token: a.Msg.Token, Fresh: req.Fresh, Handle: h}, nil
}

func (s *paxlockAPISession) Renew(ctx context.Context, l load.Lease, ttl time.Duration) error {
	h := l.Handle.(*apiHold)
	r, err := s.node(l.Key).Renew(ctx, connect.NewRequest(&paxlockv1.RenewRequest{Key: l.Key, Owner: h.owner, Token: l.Token, TtlMs: durMs(ttl)}))
	if err != nil {
		s.learn(nil, err)
		return apiErr(ctx, err)
	}
	s.learn(r.Header(), nil)
	return nil
}

func (s *paxlockAPISession) Release(ctx context.Context, l load.Lease) error {
	h := l.Handle.(*apiHold)
	r, err := s.node(l.Key).Release(ctx, connect.NewRequest(&paxlockv1.ReleaseRequest{Key: l.Key, Owner: h.owner, Token: l.Token}))
	if err != nil {
		s.learn(nil, err)
		return apiErr(ctx, err)
	}
	s.learn(r.Header(), nil)
	return nil
}

func (s *paxlockAPISession) Close(context.Context) error { return nil }

// durMs is d in whole milliseconds (at least 1 for a positive d), capped
// to the field.
func durMs(d time.Duration) uint32 {
	if d <= 0 {
		return 0
	}
	return uint32(min(max(d.Milliseconds(), 1), math.MaxUint32))
}

// waitMs is the wait_ms of a blocking acquire under ctx: what is left of
// its deadline, or negative (no deadline of its own) without one.
func waitMs(ctx context.Context) int32 {
	dl, ok := ctx.Deadline()
	if !ok {
		return -1
	}
	return int32(min(max(time.Until(dl).Milliseconds(), 1), math.MaxInt32))
}

// deadlineSlack is how close to the caller's deadline a server's
// DEADLINE_EXCEEDED counts as that deadline.
const deadlineSlack = 50 * time.Millisecond

// atDeadline waits for ctx to end when err is the server ending the call
// at ctx's deadline, and then returns ctx's error: the timeout the Connect
// and gRPC protocols send is rounded down (to whole milliseconds, in the
// Connect protocol), so the server's end of a wait that lasts until the
// caller's deadline can arrive just before that deadline, and the caller
// must see its own deadline, not a failure.
func atDeadline(ctx context.Context, err error) error {
	dl, ok := ctx.Deadline()
	if !ok || connect.CodeOf(err) != connect.CodeDeadlineExceeded || time.Until(dl) > deadlineSlack {
		return err
	}
	<-ctx.Done()
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}

// apiErr maps the API's codes onto the harness's kinds (docs/api.md,
// Errors) and keeps context errors recognizable.
func apiErr(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("paxlock-api: %w", err)
	case ctx.Err() != nil:
		return fmt.Errorf("paxlock-api: %w (%v)", ctx.Err(), err)
	}
	switch connect.CodeOf(err) {
	case connect.CodeDeadlineExceeded:
		return fmt.Errorf("paxlock-api: %w: %v", context.DeadlineExceeded, err)
	case connect.CodeCanceled:
		return fmt.Errorf("paxlock-api: %w: %v", context.Canceled, err)
	case connect.CodeNotFound, connect.CodePermissionDenied, connect.CodeAborted:
		return fmt.Errorf("paxlock-api: %w: %v", load.ErrNotHeld, err)
	case connect.CodeUnavailable, connect.CodeResourceExhausted:
		return fmt.Errorf("paxlock-api: %w: %v", load.ErrUnavailable, err)
	}
	return fmt.Errorf("paxlock-api: %w", err)
}
