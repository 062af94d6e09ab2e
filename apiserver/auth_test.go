package apiserver

import (
	"context"
	"strconv"
	"testing"

	"github.com/paxlock/paxlock/client/scramauth"
)

func verifier(t *testing.T, secret string) scramauth.Verifier {
	t.Helper()
	v, err := scramauth.NewVerifier(secret)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustCheck(t *testing.T, a *authCache, ns, secret string, v scramauth.Verifier) bool {
	t.Helper()
	ok, err := a.check(context.Background(), ns, secret, v)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestAuthCacheDerivesOnce: a verified secret is checked again without a
// key derivation; a wrong one is refused every time (never cached).
func TestAuthCacheDerivesOnce(t *testing.T) {
	t.Parallel()
	a := newAuthCache()
	v := verifier(t, "good")
	for range 3 {
		if !mustCheck(t, a, "ns", "good", v) {
			t.Fatal("the right secret refused")
		}
	}
	if n := a.derived.Load(); n != 1 {
		t.Fatalf("%d derivations for one secret checked 3 times, want 1", n)
	}
	for range 2 {
		if mustCheck(t, a, "ns", "bad", v) {
			t.Fatal("a wrong secret accepted")
		}
	}
}

// TestAuthCacheInvalidatedByNewVerifier: once the namespace's verifier
// changes (a new secret), the old secret is refused although it was
// cached, and the new one is accepted.
func TestAuthCacheInvalidatedByNewVerifier(t *testing.T) {
	t.Parallel()
	a := newAuthCache()
	old := verifier(t, "old")
	if !mustCheck(t, a, "ns", "old", old) {
		t.Fatal("the right secret refused")
	}
	cur := verifier(t, "new")
	if mustCheck(t, a, "ns", "old", cur) {
		t.Fatal("the old secret accepted after the verifier changed")
	}
	if !mustCheck(t, a, "ns", "new", cur) {
		t.Fatal("the new secret refused")
	}
}

// TestAuthCacheBounded: the cache keeps at most maxCached secrets.
func TestAuthCacheBounded(t *testing.T) {
	t.Parallel()
	a := newAuthCache()
	v := scramauth.Verifier{Salt: []byte("salt-salt-salt-1"), Iters: 1}
	for i := range maxCached + 10 {
		s := strconv.Itoa(i)
		d, err := scramauth.Derive(s, v.Salt, v.Iters)
		if err != nil {
			t.Fatal(err)
		}
		if !mustCheck(t, a, "ns", s, d) {
			t.Fatal("the right secret refused")
		}
	}
	if n := len(a.m); n > maxCached {
		t.Fatalf("cache holds %d secrets, bound %d", n, maxCached)
	}
}
