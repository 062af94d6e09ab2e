package session

import "github.com/paxlock/paxlock/client/wire"

// Replier answers a request with a Response; every Endpoint is one.
type Replier interface {
	Reply(reqID uint64, r wire.Response)
}

// DecodeRequest reads frame f as a request, the first step of every
// accepting side: a frame of a type that is no request, or whose body
// does not decode, is answered BAD_REQUEST through r and reports false.
// decode decodes f's body (a wire.Codec's Decode, or a decoding into
// values the caller reuses).
func DecodeRequest(f wire.Frame, decode func(wire.Frame) (wire.Message, error), r Replier) (wire.Message, bool) {
	if !f.Type.IsRequest() {
		r.Reply(f.ReqID, wire.Response{Status: wire.StatusBadRequest, Msg: "not a request type: " + f.Type.String()})
		return nil, false
	}
	m, err := decode(f)
	if err != nil {
		r.Reply(f.ReqID, wire.Response{Status: wire.StatusBadRequest, Msg: err.Error()})
		return nil, false
	}
	return m, true
}

// Admit answers m, the decoded body of request reqID, as every accepting
// side that serves requests of its own does before them, and reports
// whether m is left to the caller: the session's own requests are
// answered by Handle; a request that does not validate
// (wire.Request.Validate) is answered BAD_REQUEST; any other before a
// handshake was accepted is answered AUTH_FAILED. A request the caller
// gets is valid and comes from an authenticated session.
func (a *Accepted) Admit(reqID uint64, m wire.Message, h Endpoint) bool {
	if a.Handle(reqID, m, h) {
		return false
	}
	if r, ok := m.(wire.Request); ok {
		if err := r.Validate(); err != nil {
			h.Reply(reqID, wire.Response{Status: wire.StatusBadRequest, Msg: err.Error()})
			return false
		}
	}
	if !a.authenticated {
		h.Reply(reqID, wire.Response{Status: wire.StatusAuthFailed, Msg: "authenticate first (SCRAM handshake)"})
		return false
	}
	return true
}
