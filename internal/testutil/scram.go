package testutil

import (
	"fmt"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// Call sends one request and returns its reply, as a test's raw
// connection does.
type Call func(typ wire.Type, m wire.Message) wire.Message

// ScramHello authenticates a raw connection as the client with key key in
// namespace ns, with secret: the SCRAM-SHA-256 handshake of package
// session, written out for tests that speak the protocol by hand. It
// returns the outcome in the shape of a Hello's answer: SUCCESS with the
// view version, or the server's refusal.
func ScramHello(call Call, ns, secret, key string) (*wire.Response, error) {
	return ScramHelloVia(call, ns, secret, key, 0)
}

// ScramHelloVia is ScramHello with the ScramClientFirst's Via set: with a
// node id and the cluster's relay secret, it opens a relay's session as
// that node would.
func ScramHelloVia(call Call, ns, secret, key string, via uint32) (*wire.Response, error) {
	cl, err := scramauth.NewClient(ns, secret)
	if err != nil {
		return nil, err
	}
	msg, err := cl.First()
	if err != nil {
		return nil, err
	}
	first := &wire.ScramClientFirst{Namespace: ns, ClientID: wire.ClientIDOf(key), ClientKey: key, Agent: "test",
		Mechanism: wire.MechanismSCRAMSHA256, Message: msg, Via: via}
	var sf *wire.ScramServerFirst
	switch m := call(wire.TypeScramClientFirst, first).(type) {
	case *wire.Response:
		return m, nil
	case *wire.ScramServerFirst:
		sf = m
	default:
		return nil, fmt.Errorf("reply to ScramClientFirst: %T", m)
	}
	if msg, err = cl.Final(sf.Message); err != nil {
		return nil, err
	}
	switch m := call(wire.TypeScramClientFinal, &wire.ScramClientFinal{Message: msg}).(type) {
	case *wire.Response:
		return m, nil
	case *wire.ScramServerFinal:
		if err := cl.Verify(m.Message); err != nil {
			return nil, err
		}
		return &wire.Response{Status: wire.StatusSuccess, ViewVersion: m.ViewVersion}, nil
	default:
		return nil, fmt.Errorf("reply to ScramClientFinal: %T", m)
	}
}
