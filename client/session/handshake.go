package session

import (
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// ErrUnexpectedReply reports a handshake reply that is not a Response.
var ErrUnexpectedReply = errors.New("session: unexpected reply")

// Handshake opens a session on a new connection, before anything else is
// sent: it exchanges requests and replies with the peer through ex and
// returns the final reply. It returns a *RefusedError when the peer
// refuses. SCRAM is a client's handshake, RelayHello a relaying node's.
type Handshake func(ex *Exchange) (wire.Response, error)

// SCRAM is the client handshake of protocol version 2: a SCRAM-SHA-256
// exchange (see package wire) that proves the client knows namespace
// first.Namespace's secret without sending it, and proves that the server
// holds the namespace's verifier. first carries the client's identity
// (namespace, client id and key, agent); its Mechanism and Message are
// filled in. The final reply is SUCCESS with the server's view version.
func SCRAM(first wire.ScramClientFirst, secret string) Handshake {
	return func(ex *Exchange) (wire.Response, error) {
		cl, err := scramauth.NewClient(first.Namespace, secret)
		if err != nil {
			return wire.Response{}, err
		}
		msg, err := cl.First()
		if err != nil {
			return wire.Response{}, err
		}
		first.Mechanism, first.Message = wire.MechanismSCRAMSHA256, msg
		var sf wire.ScramServerFirst
		if r, err := ex.Call(wire.TypeScramClientFirst, &first, wire.TypeScramServerFirst, &sf); err != nil {
			return r, err
		}
		msg, err = cl.Final(sf.Message)
		if err != nil {
			return wire.Response{}, err
		}
		var fin wire.ScramServerFinal
		if r, err := ex.Call(wire.TypeScramClientFinal, &wire.ScramClientFinal{Message: msg}, wire.TypeScramServerFinal, &fin); err != nil {
			return r, err
		}
		if err := cl.Verify(fin.Message); err != nil {
			return wire.Response{}, err
		}
		return wire.Response{Status: wire.StatusSuccess, ViewVersion: fin.ViewVersion}, nil
	}
}

// RelayHello is the handshake of a node relaying a client's requests to
// the master of their group over a connection that proves which node it
// is (TLS with the node's certificate): one Hello naming the client
// (namespace, id, key) with Via set and no secret, which the master
// accepts only from the node Via names (see Endpoint.TrustRelay). Without
// such a connection a relay uses SCRAM with first.Via set and the
// cluster's relay secret (see Endpoint.RelayCredentials).
func RelayHello(h wire.Hello) Handshake {
	return func(ex *Exchange) (wire.Response, error) {
		return ex.RoundTrip(wire.TypeHello, &h)
	}
}

// RefusedError is a handshake the peer refused: its reply, whose status is
// not SUCCESS (AUTH_FAILED for a wrong namespace or secret).
type RefusedError struct {
	Reply wire.Response
}

func (e *RefusedError) Error() string {
	if e.Reply.Msg == "" {
		return "refused: " + e.Reply.Status.String()
	}
	return "refused: " + e.Reply.Status.String() + ": " + e.Reply.Msg
}

// Exchange is a connection during its handshake: one request at a time,
// nothing else running on it. Its deadline is the handshake's.
type Exchange struct {
	c    *Conn
	next uint64
	enc  wire.Codec
	buf  []byte
}

// RoundTrip sends one request and reads frames until its reply, skipping
// pushes. A reply other than a Response is ErrUnexpectedReply; a Response
// whose status is not SUCCESS is a *RefusedError.
func (ex *Exchange) RoundTrip(typ wire.Type, m wire.Message) (wire.Response, error) {
	var r wire.Response
	if _, err := ex.Call(typ, m, wire.TypeResponse, &r); err != nil {
		return r, err
	}
	return r, nil
}

// Call sends one request and reads frames until its reply, skipping
// pushes: a reply of type want is decoded into reply; a Response (when
// want is not TypeResponse) must be a refusal and is returned as a
// *RefusedError, with the Response; any other reply is
// ErrUnexpectedReply. With want TypeResponse, a Response whose status is
// not SUCCESS is a *RefusedError too.
func (ex *Exchange) Call(typ wire.Type, m wire.Message, want wire.Type, reply wire.Message) (wire.Response, error) {
	c := ex.c
	ex.next++
	id := ex.next
	ex.enc.MaxFrame = c.cfg.MaxFrame
	frame, err := ex.enc.AppendFrame(ex.buf[:0], typ, id, m)
	if err != nil {
		return wire.Response{}, fmt.Errorf("encode %s: %w", typ, err)
	}
	ex.buf = frame
	if _, err := c.nc.Write(frame); err != nil {
		return wire.Response{}, fmt.Errorf("write: %w", err)
	}
	for {
		f, nb, err := wire.ReadFrame(c.br, ex.buf, c.cfg.MaxFrame)
		ex.buf = nb
		if err != nil {
			return wire.Response{}, fmt.Errorf("read: %w", err)
		}
		if f.ReqID != id {
			continue // a push, or a stale reply
		}
		c.lastRecv.Store(c.now())
		switch {
		case f.Type == want:
			if err := ex.enc.DecodeInto(f.Body, reply); err != nil {
				return wire.Response{}, fmt.Errorf("decode %s: %w", f.Type, err)
			}
			if r, ok := reply.(*wire.Response); ok && r.Status != wire.StatusSuccess {
				return *r, &RefusedError{Reply: *r}
			}
			return wire.Response{}, nil
		case f.Type == wire.TypeResponse:
			var r wire.Response
			if err := ex.enc.DecodeInto(f.Body, &r); err != nil {
				return wire.Response{}, fmt.Errorf("decode reply: %w", err)
			}
			if r.Status == wire.StatusSuccess {
				return r, fmt.Errorf("%w: SUCCESS to %s", ErrUnexpectedReply, typ)
			}
			return r, &RefusedError{Reply: r}
		default:
			return wire.Response{}, fmt.Errorf("%w: %s", ErrUnexpectedReply, f.Type)
		}
	}
}
