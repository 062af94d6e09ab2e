// Package scramauth is paxlock's use of SCRAM-SHA-256 (RFC 5802, RFC 7677,
// through github.com/xdg-go/scram) for namespace secrets: the verifier a
// server stores in place of a secret, the client's side of the exchange,
// and the server's.
//
// The SCRAM user name is the namespace and the password its secret, used
// as they are (no SASLprep: both sides are paxlock's, and a secret is
// opaque bytes to it). Channel binding is not used: on a TLS connection
// the TLS handshake already authenticates the server.
package scramauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"

	"github.com/xdg-go/scram"
)

const (
	// Iterations is the PBKDF2 iteration count of new verifiers: RFC
	// 7677's minimum. The client pays it once per connection.
	Iterations = 4096
	// MaxIterations bounds the iteration count a client accepts from a
	// server, so that a hostile server cannot make it spin.
	MaxIterations = 1 << 20
	// SaltLen is the length of a new verifier's salt.
	SaltLen = 16
	// KeyLen is the length of StoredKey and ServerKey (SHA-256).
	KeyLen = sha256.Size
)

// ErrInvalidVerifier reports a verifier whose fields are out of range.
var ErrInvalidVerifier = errors.New("scramauth: invalid verifier")

// Verifier is what a server keeps of a namespace's secret: the salt and
// iteration count the client derives its keys with, and StoredKey and
// ServerKey (RFC 5802 section 3). It lets the server check a client's
// proof and prove itself, but not authenticate as a client: the client's
// proof needs ClientKey, which StoredKey is a hash of.
type Verifier struct {
	Salt      []byte
	Iters     int
	StoredKey []byte
	ServerKey []byte
}

// Validate checks the verifier's field lengths and iteration count.
func (v Verifier) Validate() error {
	if len(v.Salt) == 0 || len(v.Salt) > 64 || v.Iters < 1 || v.Iters > MaxIterations ||
		len(v.StoredKey) != KeyLen || len(v.ServerKey) != KeyLen {
		return ErrInvalidVerifier
	}
	return nil
}

// Equal reports whether two verifiers are the same, in constant time.
func (v Verifier) Equal(o Verifier) bool {
	return v.Iters == o.Iters &&
		subtle.ConstantTimeCompare(v.Salt, o.Salt) == 1 &&
		subtle.ConstantTimeCompare(v.StoredKey, o.StoredKey) == 1 &&
		subtle.ConstantTimeCompare(v.ServerKey, o.ServerKey) == 1
}

// NewVerifier derives a verifier for secret with a fresh random salt and
// Iterations.
func NewVerifier(secret string) (Verifier, error) {
	salt := make([]byte, SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return Verifier{}, fmt.Errorf("scramauth: salt: %w", err)
	}
	return Derive(secret, salt, Iterations)
}

// Derive derives the verifier of secret with the given salt and iteration
// count (PBKDF2-HMAC-SHA-256): the same inputs give the same verifier on
// every node.
func Derive(secret string, salt []byte, iters int) (Verifier, error) {
	c, err := scram.SHA256.NewClientUnprepped("", secret, "")
	if err != nil {
		return Verifier{}, fmt.Errorf("scramauth: %w", err)
	}
	cred, err := c.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iters})
	if err != nil {
		return Verifier{}, fmt.Errorf("scramauth: %w", err)
	}
	return Verifier{Salt: append([]byte(nil), salt...), Iters: iters, StoredKey: cred.StoredKey, ServerKey: cred.ServerKey}, nil
}

func (v Verifier) credentials() scram.StoredCredentials {
	return scram.StoredCredentials{
		KeyFactors: scram.KeyFactors{Salt: string(v.Salt), Iters: v.Iters},
		StoredKey:  v.StoredKey,
		ServerKey:  v.ServerKey,
	}
}

// Client is the client's side of one SCRAM exchange.
type Client struct {
	conv *scram.ClientConversation
}

// NewClient starts the client's side of an exchange for namespace ns.
func NewClient(ns, secret string) (*Client, error) {
	c, err := scram.SHA256.NewClientUnprepped(ns, secret, "")
	if err != nil {
		return nil, fmt.Errorf("scramauth: %w", err)
	}
	return &Client{conv: c.WithMinIterations(Iterations).NewConversation()}, nil
}

// First returns the client-first-message.
func (c *Client) First() (string, error) { return c.conv.Step("") }

// Final takes the server-first-message and returns the client-final one
// (the proof).
func (c *Client) Final(serverFirst string) (string, error) {
	if err := checkIters(serverFirst); err != nil {
		return "", err
	}
	return c.conv.Step(serverFirst)
}

// ErrServerUnverified reports a server whose SCRAM signature is wrong: it
// does not hold the namespace's verifier.
var ErrServerUnverified = errors.New("scramauth: the server's signature is wrong: it does not know the namespace's verifier")

// Verify takes the server-final-message and reports, as
// ErrServerUnverified, a server whose signature is wrong.
func (c *Client) Verify(serverFinal string) error {
	if _, err := c.conv.Step(serverFinal); err != nil {
		return fmt.Errorf("%w: %w", ErrServerUnverified, err)
	}
	if !c.conv.Valid() {
		return ErrServerUnverified
	}
	return nil
}

// checkIters refuses a server-first-message whose iteration count is over
// MaxIterations (the library bounds it from below only).
func checkIters(serverFirst string) error {
	for _, f := range strings.Split(serverFirst, ",") {
		if len(f) > 2 && f[:2] == "i=" {
			n := 0
			for _, d := range f[2:] {
				if d < '0' || d > '9' {
					return errors.New("scramauth: bad iteration count")
				}
				n = n*10 + int(d-'0')
				if n > MaxIterations {
					return fmt.Errorf("scramauth: iteration count over %d", MaxIterations)
				}
			}
		}
	}
	return nil
}

// Lookup returns namespace ns's verifier, false if there is none.
type Lookup func(ns string) (Verifier, bool)

// Server is the server's side of one SCRAM exchange. Not safe for
// concurrent use.
type Server struct {
	ns     string
	lookup Lookup
	conv   *scram.ServerConversation
	v      Verifier
	known  bool
}

// decoyKey makes the verifier answered for an unknown namespace: its salt
// is stable per name for this process's life, so that the server-first
// message does not tell a prober whether the namespace exists.
var decoyKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}()

func decoy(ns string) Verifier {
	m := hmac.New(sha256.New, decoyKey)
	m.Write([]byte(ns))
	sum := m.Sum(nil)
	keys := make([]byte, 2*KeyLen)
	_, _ = rand.Read(keys)
	return Verifier{Salt: sum[:SaltLen], Iters: Iterations, StoredKey: keys[:KeyLen], ServerKey: keys[KeyLen:]}
}

// NewServer starts the server's side of an exchange for namespace ns
// (the one the request that carried the client-first-message names).
// An unknown namespace is answered like a known one, with a decoy
// verifier, and fails at the proof.
func NewServer(ns string, lookup Lookup) (*Server, error) {
	s := &Server{ns: ns, lookup: lookup}
	srv, err := scram.SHA256.NewServer(func(user string) (scram.StoredCredentials, error) {
		if user != s.ns {
			return scram.StoredCredentials{}, errors.New("user name is not the namespace")
		}
		v, ok := lookup(user)
		if !ok || v.Validate() != nil {
			v, ok = decoy(user), false
		}
		s.v, s.known = v, ok
		return v.credentials(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("scramauth: %w", err)
	}
	s.conv = srv.NewConversation()
	return s, nil
}

// ErrRefused is a client that failed SCRAM: an unknown namespace, a wrong
// secret, or a malformed message.
var ErrRefused = errors.New("unknown namespace or wrong secret")

// First takes the client-first-message and returns the
// server-first-message.
func (s *Server) First(clientFirst string) (string, error) {
	out, err := s.conv.Step(clientFirst)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return out, nil
}

// Final takes the client-final-message and, if its proof is right,
// returns the server-final-message and the verifier it was checked
// against (for revocation: a session stays valid while its namespace's
// verifier is this one).
func (s *Server) Final(clientFinal string) (string, Verifier, error) {
	out, err := s.conv.Step(clientFinal)
	if err != nil || !s.conv.Valid() || !s.known {
		return "", Verifier{}, ErrRefused
	}
	return out, s.v, nil
}
