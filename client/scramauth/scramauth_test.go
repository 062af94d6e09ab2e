package scramauth

import (
	"errors"
	"strings"
	"testing"
)

// exchange runs a whole exchange between a client with secret and a
// server that knows ns's verifier v.
func exchange(t *testing.T, ns, secret string, v Verifier) (Verifier, error) {
	t.Helper()
	cl, err := NewClient(ns, secret)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(ns, func(n string) (Verifier, bool) { return v, n == "ns" })
	if err != nil {
		t.Fatal(err)
	}
	first, err := cl.First()
	if err != nil {
		t.Fatal(err)
	}
	sf, err := srv.First(first)
	if err != nil {
		return Verifier{}, err
	}
	final, err := cl.Final(sf)
	if err != nil {
		t.Fatal(err)
	}
	sfin, got, err := srv.Final(final)
	if err != nil {
		return Verifier{}, err
	}
	if err := cl.Verify(sfin); err != nil {
		t.Fatalf("client does not verify the server: %v", err)
	}
	return got, nil
}

func TestExchange(t *testing.T) {
	v, err := NewVerifier("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := exchange(t, "ns", "s3cret", v)
	if err != nil || !got.Equal(v) {
		t.Fatalf("right secret: %v, verifier %v", err, got.Equal(v))
	}
	if _, err := exchange(t, "ns", "wrong", v); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong secret: %v, want ErrRefused", err)
	}
	// An unknown namespace gets a server-first message like a known one
	// (a decoy salt), and fails at the proof.
	if _, err := exchange(t, "nope", "s3cret", v); !errors.Is(err, ErrRefused) {
		t.Fatalf("unknown namespace: %v, want ErrRefused", err)
	}
}

// TestDeriveDeterministic: the same secret, salt and count give the same
// verifier (nodes deriving a configured namespace's agree); another
// secret or salt another one.
func TestDeriveDeterministic(t *testing.T) {
	salt := []byte("0123456789abcdef")
	a, _ := Derive("pw", salt, Iterations)
	b, _ := Derive("pw", salt, Iterations)
	c, _ := Derive("pw2", salt, Iterations)
	d, _ := Derive("pw", []byte("fedcba9876543210"), Iterations)
	if !a.Equal(b) || a.Equal(c) || a.Equal(d) {
		t.Fatal("Derive is not a function of secret, salt and count")
	}
}

// TestClientRefusesHugeIterations: a server cannot make the client spin.
func TestClientRefusesHugeIterations(t *testing.T) {
	cl, err := NewClient("ns", "pw")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := cl.First()
	nonce := first[strings.Index(first, "r=")+2:]
	if _, err := cl.Final("r=" + nonce + "srv,s=c2FsdHNhbHQ=,i=999999999"); err == nil {
		t.Fatal("an iteration count of 999999999 was accepted")
	}
}

// FuzzServer feeds arbitrary client messages to the server's side: it
// must refuse them without panicking, and never accept a proof made
// without the secret.
func FuzzServer(f *testing.F) {
	v, err := NewVerifier("s3cret")
	if err != nil {
		f.Fatal(err)
	}
	f.Add("n,,n=ns,r=fyko+d2lbbFgONRv9qkxdawL", "c=biws,r=fyko+d2lbbFgONRv9qkxdawL,p=AAAA")
	f.Add("n,,n=ns,r=x", "")
	f.Add("y,,n=ns,r=abc", "c=eSws,r=abc,p=dGVzdA==")
	f.Add("p=tls-exporter,,n=ns,r=abc", "c=cD10bHMtZXhwb3J0ZXIsLA==,r=abc,p=dGVzdA==")
	f.Add("n,a=other,n=ns,r=abc", "c=biws,r=abc,p=dGVzdA==")
	f.Fuzz(func(t *testing.T, first, final string) {
		srv, err := NewServer("ns", func(n string) (Verifier, bool) { return v, n == "ns" })
		if err != nil {
			t.Fatal(err)
		}
		if _, err := srv.First(first); err != nil {
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("First: %v does not wrap ErrRefused", err)
			}
			return
		}
		if _, _, err := srv.Final(final); err == nil {
			t.Fatalf("a proof made without the secret was accepted: %q %q", first, final)
		}
	})
}
