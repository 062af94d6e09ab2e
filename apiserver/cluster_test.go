package apiserver

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/paxlock/paxlock/api/paxlock/v1/paxlockv1connect"
	"github.com/paxlock/paxlock/internal/freeport"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/server"
)

// The test cluster's namespace and secret.
const (
	testNS     = "ns"
	testSecret = "s3cret"
)

// apiCluster is a 3-node cluster in this process with an API listener
// on each node, shared by the package's tests (each uses keys of its
// own).
type apiCluster struct {
	dir   string
	nodes []*server.Server
	apis  []*Listener
}

// stop shuts the cluster down and removes its files.
func (c *apiCluster) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range c.nodes {
		_ = c.apis[i].Shutdown(ctx)
		_ = c.nodes[i].Shutdown(ctx) // a second Shutdown returns the first's outcome
	}
	_ = os.RemoveAll(c.dir)
}

var (
	sharedOnce sync.Once
	shared     *apiCluster
	sharedErr  error
)

// cluster returns the shared cluster, starting it on first use; TestMain
// stops it.
func cluster(t testing.TB) *apiCluster {
	t.Helper()
	sharedOnce.Do(func() { shared, sharedErr = startCluster(3, nil) })
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// startCluster starts n nodes without TLS (relays prove a relay secret)
// and an API listener on each; tune, when set, changes each node's
// configuration first (dir is the cluster's directory). The caller
// stops it (stop) unless it is the shared one.
func startCluster(n int, tune func(dir string, c *server.Config)) (*apiCluster, error) {
	dir, err := os.MkdirTemp("", "apiserver-test")
	if err != nil {
		return nil, err
	}
	relay := filepath.Join(dir, "relay.secret")
	if err := os.WriteFile(relay, []byte("test-cluster-relay-secret\n"), 0o600); err != nil {
		return nil, err
	}
	ports, err := freeport.Loopback(6 * n)
	if err != nil {
		return nil, err
	}
	var addrs []server.NodeAddr
	for i := range n {
		addrs = append(addrs, server.NodeAddr{ID: uint32(i + 1), Peer: ports[6*i], Client: ports[6*i+1], Gossip: ports[6*i+2], Admin: ports[6*i+3]})
		if tune != nil {
			addrs[i].ClientTLS = ports[6*i+5]
		}
	}
	c := &apiCluster{dir: dir}
	for i := range n {
		cfg := server.Config{
			NodeID: uint32(i + 1), Nodes: addrs, AdminAddr: addrs[i].Admin,
			DataDir:    filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			Namespaces: []server.Namespace{{Name: testNS, Secret: testSecret}, {Name: "other", Secret: "x"}},
			// A lease a master keeps on a loaded machine under -race (see
			// the server package's testLease).
			EventLoops: 1, Lease: server.Duration(2 * time.Second), Heartbeat: server.Duration(200 * time.Millisecond),
			GossipTiming: server.GossipLocal, RelaySecretFile: relay, APIAddr: ports[6*i+4],
			FaultInjection: true, // CutPeers, for TestWatchIsolatedMaster
		}
		if tune != nil {
			tune(dir, &cfg)
		}
		s, err := server.New(cfg, testutil.Logger())
		if err != nil {
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = s.Start(ctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		api, err := Listen(s, cfg.APIAddr, Options{Log: testutil.Logger()})
		if err != nil {
			return nil, err
		}
		c.nodes, c.apis = append(c.nodes, s), append(c.apis, api)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, s := range c.nodes {
		if err := s.WaitReady(ctx); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// basicAuth adds HTTP Basic credentials to every request.
type basicAuth struct {
	ns, secret string
	next       http.RoundTripper
}

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(b.ns, b.secret)
	return b.next.RoundTrip(r)
}

// client is a LockService client of node i's API with credentials ns
// and secret (Connect protocol, HTTP/1.1; opts may pick gRPC).
func (c *apiCluster) client(i int, ns, secret string, opts ...connect.ClientOption) paxlockv1connect.LockServiceClient {
	var p http.Protocols
	if len(opts) == 0 {
		p.SetHTTP1(true)
	} else {
		p.SetUnencryptedHTTP2(true) // gRPC: HTTP/2 without TLS (h2c)
	}
	tr := &http.Transport{Protocols: &p}
	hc := &http.Client{Transport: basicAuth{ns: ns, secret: secret, next: tr}}
	opts = append(opts, connect.WithInterceptors(retryUnavailable()))
	return paxlockv1connect.NewLockServiceClient(hc, "http://"+c.apis[i].Addr(), opts...)
}

// retryUnavailable re-sends a unary call answered UNAVAILABLE (no master
// for the key's group at that moment: docs/api.md's retry rule) after 50
// ms, until the call's context ends, as an API client does: the tests
// check what the service answers once a group has a master, not how fast
// a loaded machine re-elects one.
func retryUnavailable() connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			for {
				resp, err := next(ctx, req)
				if connect.CodeOf(err) != connect.CodeUnavailable {
					return resp, err
				}
				select {
				case <-ctx.Done():
					return resp, err
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
	}
}

// tctx is a test's context: 30 s.
func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// forwarded sums paxlock_forwarded_total over the nodes' /metrics.
func (c *apiCluster) forwarded(t testing.TB) int {
	t.Helper()
	total := 0
	for _, s := range c.nodes {
		resp, err := http.Get("http://" + s.Config().AdminAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "paxlock_forwarded_total "); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				total += int(n)
			}
		}
		resp.Body.Close()
	}
	return total
}

// TestMain stops the shared cluster, if a test started it, and removes
// its files.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}
