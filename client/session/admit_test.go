package session

import (
	"errors"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

func TestDecodeRequest(t *testing.T) {
	h := newHost()
	var dec wire.Codec
	decode := func(f wire.Frame) (wire.Message, error) { return dec.Decode(f.Type, f.Body) }
	// A reply type is no request.
	if _, ok := DecodeRequest(wire.Frame{Type: wire.TypeResponse, ReqID: 1}, decode, h); ok || h.replies[1].Status != wire.StatusBadRequest {
		t.Fatalf("a Response frame: ok %v, reply %+v", ok, h.replies[1])
	}
	// A body that does not decode.
	bad := func(wire.Frame) (wire.Message, error) { return nil, errors.New("garbled") }
	if _, ok := DecodeRequest(wire.Frame{Type: wire.TypeState, ReqID: 2}, bad, h); ok ||
		h.replies[2].Status != wire.StatusBadRequest || h.replies[2].Msg != "garbled" {
		t.Fatalf("a bad body: ok %v, reply %+v", ok, h.replies[2])
	}
	body, err := dec.AppendBody(nil, &wire.State{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := DecodeRequest(wire.Frame{Type: wire.TypeState, ReqID: 3, Body: body}, decode, h)
	if st, isState := m.(*wire.State); !ok || !isState || st.Key != "k" {
		t.Fatalf("a State: ok %v, m %#v", ok, m)
	}
	if _, answered := h.replies[3]; answered {
		t.Fatal("a good request was answered")
	}
}

func TestAdmit(t *testing.T) {
	h := newHost()
	var a Accepted
	// The session's own requests are the session's, handshake or not.
	if a.Admit(1, &wire.Heartbeat{}, h) || h.replies[1].Status != wire.StatusSuccess {
		t.Fatalf("Heartbeat: %+v", h.replies[1])
	}
	// An invalid request is refused before the handshake is asked for.
	if a.Admit(2, &wire.State{}, h) || h.replies[2].Status != wire.StatusBadRequest {
		t.Fatalf("an invalid State: %+v", h.replies[2])
	}
	// A valid one needs a handshake.
	if a.Admit(3, &wire.State{Key: "k"}, h) || h.replies[3].Status != wire.StatusAuthFailed {
		t.Fatalf("a State before the handshake: %+v", h.replies[3])
	}
	scram(t, &a, h, 4, firstOf("ns", key5), "s3cret")
	if !a.Admit(6, &wire.State{Key: "k"}, h) {
		t.Fatal("a valid State of an authenticated session was not left to the caller")
	}
	if _, answered := h.replies[6]; answered {
		t.Fatal("a request left to the caller was answered")
	}
}
