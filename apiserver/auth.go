package apiserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/pki"
)

// Bounds of the verified-secret cache.
const (
	// maxCached is the most verified secrets kept; past it one is
	// dropped for each new one.
	maxCached = 1024
	// maxDerivations is the most key derivations (PBKDF2, thousands of
	// HMACs each) under way at once: wrong secrets cost the node at most
	// this many cores.
	maxDerivations = 2
)

// caller is who an HTTP request says it is: its Basic credentials and
// the namespaces its verified TLS client certificate names; w is the
// answer's writer, whose headers get the routing hints (setHint).
type caller struct {
	ns, secret string
	basic      bool
	certNS     []string
	w          http.ResponseWriter
}

type callerKey struct{}

// withCaller puts the request's caller in its context for the handler
// methods, which authenticate it (Service.open).
func withCaller(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := caller{w: w}
		c.ns, c.secret, c.basic = r.BasicAuth()
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			c.certNS = pki.ClientNamespaces(r.TLS.PeerCertificates[0])
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// errUnauthenticated refuses a caller without valid credentials; the
// message never says which part was wrong.
var errUnauthenticated = errors.New("authentication failed: HTTP Basic namespace:secret required (and, under bind_namespace, a client certificate naming the namespace)")

// unauthenticated is the error of a refused caller.
func unauthenticated() error {
	return apiError(connect.CodeUnauthenticated, wire.StatusAuthFailed.String(), errUnauthenticated)
}

// authCache remembers the secrets it verified against a namespace's
// verifier, so that a caller's next request costs an HMAC and a map
// lookup, not a key derivation. An entry counts only while the namespace's
// verifier is the one it was verified against: a changed secret (a new
// verifier) or a removed namespace invalidates it at the next request.
// Entries are keyed by an HMAC of namespace and secret under a key of
// this process, so the cache holds no secret.
type authCache struct {
	key     [32]byte
	derive  chan struct{} // maxDerivations slots
	derived atomic.Int64  // key derivations run (cache misses)

	mu sync.Mutex
	m  map[[sha256.Size]byte]scramauth.Verifier
}

func newAuthCache() *authCache {
	a := &authCache{derive: make(chan struct{}, maxDerivations), m: make(map[[sha256.Size]byte]scramauth.Verifier)}
	_, _ = rand.Read(a.key[:])
	return a
}

// check reports whether secret is namespace ns's secret, whose verifier
// is v; a cache miss waits, within ctx, for a derivation slot.
func (a *authCache) check(ctx context.Context, ns, secret string, v scramauth.Verifier) (bool, error) {
	mac := hmac.New(sha256.New, a.key[:])
	mac.Write([]byte(ns))
	mac.Write([]byte{0})
	mac.Write([]byte(secret))
	var k [sha256.Size]byte
	mac.Sum(k[:0])
	a.mu.Lock()
	cached, ok := a.m[k]
	a.mu.Unlock()
	if ok && cached.Equal(v) {
		return true, nil
	}
	select {
	case a.derive <- struct{}{}:
	case <-ctx.Done():
		return false, ctxErr(ctx)
	}
	d, err := scramauth.Derive(secret, v.Salt, v.Iters)
	a.derived.Add(1)
	<-a.derive
	good := err == nil && d.Equal(v)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !good {
		delete(a.m, k)
		return false, nil
	}
	if _, ok := a.m[k]; !ok && len(a.m) >= maxCached {
		for old := range a.m {
			delete(a.m, old)
			break
		}
	}
	a.m[k] = v
	return true, nil
}

// authenticate checks ctx's caller (withCaller): its Basic credentials
// against the namespace's verifier and, when the node binds client
// certificates to namespaces, that its certificate names the namespace.
func (s *Service) authenticate(ctx context.Context) (caller, error) {
	c, _ := ctx.Value(callerKey{}).(caller)
	if !c.basic || wire.ValidateNamespace(c.ns) != nil || len(c.secret) > wire.MaxSecretLen {
		return c, unauthenticated()
	}
	if s.node.BindsNamespaces() && !slices.Contains(c.certNS, c.ns) {
		return c, unauthenticated()
	}
	v, ok := s.node.Verifier(c.ns)
	if !ok {
		return c, unauthenticated()
	}
	good, err := s.auth.check(ctx, c.ns, c.secret, v)
	if err != nil {
		return c, err
	}
	if !good {
		return c, unauthenticated()
	}
	return c, nil
}
