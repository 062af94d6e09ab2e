package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MechanismSCRAMSHA256 is the authentication mechanism of ScramClientFirst:
// SCRAM-SHA-256 (RFC 5802, RFC 7677) without channel binding.
const MechanismSCRAMSHA256 = "SCRAM-SHA-256"

// MaxScramMessageLen bounds the SCRAM message a ScramClientFirst,
// ScramServerFirst, ScramClientFinal or ScramServerFinal carries: they are
// a few hundred bytes (nonces, a salt, a proof).
const MaxScramMessageLen = 1024

// The client handshake of protocol version 2 (see also Hello) is a SCRAM
// exchange in two round trips, before any other request:
//
//	client                                   server
//	ScramClientFirst(namespace, client id,
//	  client key, client-first-message)  ->
//	                                      <- ScramServerFirst(server-first-message)
//	ScramClientFinal(client-final-message) ->
//	                                      <- ScramServerFinal(server-final-message)
//
// The SCRAM user name is the namespace; the password is the namespace's
// secret, which never travels: the client proves it knows it with a proof
// bound to the server's fresh nonce, and the server proves with its
// signature that it holds the namespace's verifier. Either step can be
// answered with a Response AUTH_FAILED instead, which ends the exchange.
// The session is authenticated once the client has read ScramServerFinal
// and checked its signature.

// ScramClientFirst starts the SCRAM handshake (request TypeScramClientFirst,
// reply ScramServerFirst or Response AUTH_FAILED). Besides the SCRAM
// client-first-message it carries what Hello carried, the secret excepted.
//
// A node relaying a client's requests to a master whose peers run
// without TLS opens its connection with it too, Via set to its node id:
// the exchange then proves the cluster's relay secret (the node's
// relay_secret_file), not the namespace's, and names the client (its id
// and key) the relay speaks for. With peer TLS a relay says Hello
// instead, on the TLS listener with its node certificate.
type ScramClientFirst struct {
	// Namespace is the tenant; it is also the SCRAM user name.
	Namespace string
	// ClientID is the client's Owner.Client value, ClientIDOf(ClientKey);
	// see Hello.
	ClientID uint64
	// Agent names the client library and version, for logs (may be empty).
	Agent string
	// ClientKey proves ClientID; see Hello. Never log it.
	ClientKey string
	// Mechanism is MechanismSCRAMSHA256.
	Mechanism string
	// Message is the SCRAM client-first-message (RFC 5802 section 7).
	Message string
	// Via is the relaying node's id for a relay's exchange, 0 for a
	// client's. A trailing field omitted when 0.
	Via uint32
}

func (*ScramClientFirst) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *ScramClientFirst) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(6 + optional(m.Via))
	w.str(m.Namespace)
	w.uint(m.ClientID)
	w.str(m.Agent)
	w.str(m.ClientKey)
	w.str(m.Mechanism)
	w.str(m.Message)
	if m.Via != 0 {
		w.uint(uint64(m.Via))
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *ScramClientFirst) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = ScramClientFirst{
		Namespace: f.str(),
		ClientID:  f.u64(),
		Agent:     f.str(),
		ClientKey: f.str(),
		Mechanism: f.str(),
		Message:   f.str(),
		Via:       f.u32(),
	}
	return f.done("ScramClientFirst")
}

// Validate checks the namespace, the client id and key (as Hello's), the
// mechanism and the message's length.
func (m *ScramClientFirst) Validate() error {
	if err := ValidateNamespace(m.Namespace); err != nil {
		return err
	}
	if m.ClientID == 0 {
		return fmt.Errorf("%w: client id is 0", ErrInvalidField)
	}
	if len(m.Agent) > MaxKeyLen {
		return fmt.Errorf("%w: agent of %d bytes", ErrInvalidField, len(m.Agent))
	}
	if m.Mechanism != MechanismSCRAMSHA256 {
		return fmt.Errorf("%w: mechanism %q, want %s", ErrInvalidField, m.Mechanism, MechanismSCRAMSHA256)
	}
	if err := validateScram(m.Message); err != nil {
		return err
	}
	return validateClientKey(m.ClientKey, m.ClientID)
}

func validateScram(msg string) error {
	if msg == "" || len(msg) > MaxScramMessageLen {
		return fmt.Errorf("%w: SCRAM message of %d bytes, want 1 to %d", ErrInvalidField, len(msg), MaxScramMessageLen)
	}
	return nil
}

// ScramServerFirst is the reply (TypeScramServerFirst) to a
// ScramClientFirst: the salt, the iteration count and the nonce.
type ScramServerFirst struct {
	// Message is the SCRAM server-first-message.
	Message string
}

func (*ScramServerFirst) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *ScramServerFirst) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeScram(e, m.Message)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *ScramServerFirst) DecodeMsgpack(d *msgpack.Decoder) error {
	s, err := decodeScram(d, "ScramServerFirst")
	m.Message = s
	return err
}

// ScramClientFinal is the second request of the SCRAM handshake
// (TypeScramClientFinal, reply ScramServerFinal or Response AUTH_FAILED):
// the client's proof.
type ScramClientFinal struct {
	// Message is the SCRAM client-final-message.
	Message string
}

func (*ScramClientFinal) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *ScramClientFinal) EncodeMsgpack(e *msgpack.Encoder) error {
	return encodeScram(e, m.Message)
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *ScramClientFinal) DecodeMsgpack(d *msgpack.Decoder) error {
	s, err := decodeScram(d, "ScramClientFinal")
	m.Message = s
	return err
}

// Validate checks the message's length.
func (m *ScramClientFinal) Validate() error { return validateScram(m.Message) }

// ScramServerFinal is the reply (TypeScramServerFinal) to an accepted
// ScramClientFinal: the server's signature, and the version of the view
// the connection is served (as Hello's SUCCESS carries).
type ScramServerFinal struct {
	// Message is the SCRAM server-final-message.
	Message string
	// ViewVersion is the version of the server's cluster view.
	ViewVersion uint64
}

func (*ScramServerFinal) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *ScramServerFinal) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(2)
	w.str(m.Message)
	w.uint(m.ViewVersion)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *ScramServerFinal) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = ScramServerFinal{Message: f.str(), ViewVersion: f.u64()}
	return f.done("ScramServerFinal")
}

func encodeScram(e *msgpack.Encoder, msg string) error {
	w := fieldWriter{e: e}
	w.array(1)
	w.str(msg)
	return w.err
}

func decodeScram(d *msgpack.Decoder, what string) (string, error) {
	f := readFields(d)
	s := f.str()
	if err := f.done(what); err != nil {
		return "", err
	}
	return s, nil
}

var (
	_ Request = (*ScramClientFirst)(nil)
	_ Request = (*ScramClientFinal)(nil)
)
