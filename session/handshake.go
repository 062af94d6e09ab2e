package session

import (
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/wire"
)

// ErrUnexpectedReply reports a handshake reply that is not a Response.
var ErrUnexpectedReply = errors.New("session: unexpected reply")

// Handshake opens a session on a new connection, before anything else is
// sent: it exchanges requests and replies with the peer through ex and
// returns the final reply. It returns a *RefusedError when the peer
// refuses. Hello is today's handshake; a challenge-response one (SCRAM)
// replaces it here.
type Handshake func(ex *Exchange) (wire.Response, error)

// Hello is the handshake of protocol version 1: one Hello (namespace,
// secret in the clear, client id), answered SUCCESS or refused.
func Hello(h wire.Hello) Handshake {
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
		if f.Type != wire.TypeResponse {
			return wire.Response{}, fmt.Errorf("%w: %s", ErrUnexpectedReply, f.Type)
		}
		var r wire.Response
		if err := ex.enc.DecodeInto(f.Body, &r); err != nil {
			return wire.Response{}, fmt.Errorf("decode reply: %w", err)
		}
		c.lastRecv.Store(c.now())
		if r.Status != wire.StatusSuccess {
			return r, &RefusedError{Reply: r}
		}
		return r, nil
	}
}
