package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MaxMultiKeys is the most keys one MultiAcquire may name.
const MaxMultiKeys = 64

// MultiAcquire takes exclusive locks on several keys of one lock group at
// once: the group's master decides all of them in one Paxos command, so
// either every key is granted (each to its own owner, Client with IDs[i])
// or none is. It never waits: a key that is held by another owner, or has
// waiters queued, makes the whole request fail with LOCK_OCCUPIED.
//
// Replies: SUCCESS with Tokens (Tokens[i] is Keys[i]'s fencing token;
// Token is Tokens[0]) and TTLLeftMs; LOCK_OCCUPIED with KeyIndex naming
// the key that is taken and its holder, token, TTL left, value and queue
// length as for Acquire; BAD_REQUEST when the keys are not all in one
// group; the routing and overload statuses. A server that predates the
// request answers BAD_REQUEST (unknown type).
//
// A key the owner already holds is reacquired (token kept, TTL and value
// refreshed), so a retried MultiAcquire whose first attempt was applied
// succeeds with the same tokens.
type MultiAcquire struct {
	// Client is every owner's Owner.Client.
	Client uint64
	// Keys are the locks' names (1..MaxMultiKeys, distinct, all in one
	// lock group); the request is routed by Keys[0].
	Keys []string
	// IDs[i] is the Owner.ID of Keys[i]'s owner (len(IDs) == len(Keys)).
	IDs []uint64
	// TTLMs is every lock's TTL in milliseconds (0: the server's default).
	TTLMs uint32
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// Value is every grant's holder value; a trailing field omitted when
	// empty.
	Value string
}

func (*MultiAcquire) wireMessage() {}

// RoutingKey implements Routed.
func (m *MultiAcquire) RoutingKey() string {
	if len(m.Keys) == 0 {
		return ""
	}
	return m.Keys[0]
}

// RedirectCount implements Routed.
func (m *MultiAcquire) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *MultiAcquire) SetRedirectCount(n uint8) { m.Redirects = n }

// Owner returns Keys[i]'s owner.
func (m *MultiAcquire) Owner(i int) Owner { return Owner{Client: m.Client, ID: m.IDs[i]} }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *MultiAcquire) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	n := 5
	if m.Value != "" {
		n = 6
	}
	w.array(n)
	w.uint(m.Client)
	w.array(len(m.Keys))
	for _, k := range m.Keys {
		w.str(k)
	}
	w.array(len(m.IDs))
	for _, id := range m.IDs {
		w.uint(id)
	}
	w.uint(uint64(m.TTLMs))
	w.uint(uint64(m.Redirects))
	if n > 5 {
		w.bin(m.Value)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *MultiAcquire) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = MultiAcquire{Client: f.u64()}
	if n := f.list(MaxMultiKeys); n > 0 {
		m.Keys = make([]string, n)
		for i := range m.Keys {
			m.Keys[i] = f.elemStr()
		}
	}
	if n := f.list(MaxMultiKeys); n > 0 {
		m.IDs = make([]uint64, n)
		for i := range m.IDs {
			m.IDs[i] = f.elemU64()
		}
	}
	m.TTLMs = f.u32()
	m.Redirects = f.u8()
	m.Value, _ = f.bin()
	return f.done("MultiAcquire")
}

// Validate checks the keys (1..MaxMultiKeys, valid, distinct), that every
// key has an owner id, the client id and the value. That the keys share a
// group is the server's to check (it knows the group count).
func (m *MultiAcquire) Validate() error {
	if len(m.Keys) == 0 || len(m.Keys) > MaxMultiKeys {
		return fmt.Errorf("%w: multi-acquire of %d keys (1..%d)", ErrInvalidField, len(m.Keys), MaxMultiKeys)
	}
	if len(m.IDs) != len(m.Keys) {
		return fmt.Errorf("%w: multi-acquire of %d keys with %d owner ids", ErrInvalidField, len(m.Keys), len(m.IDs))
	}
	if err := validateOwner(Owner{Client: m.Client}); err != nil {
		return err
	}
	seen := make(map[string]struct{}, len(m.Keys))
	for _, k := range m.Keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%w: multi-acquire names key %q twice", ErrInvalidField, k)
		}
		seen[k] = struct{}{}
	}
	return ValidateValue(m.Value)
}
