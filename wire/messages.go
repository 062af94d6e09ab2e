package wire

import (
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// WaitForever, as MaxWaitMs, asks to wait with no deadline.
const WaitForever = math.MaxUint32

// Limits on a View's lists, checked when one is decoded.
const (
	// MaxViewGroups is the most groups a View may list.
	MaxViewGroups = 1024
	// MaxViewNodes is the most nodes a View may list.
	MaxViewNodes = 1024
)

// Request is a message a client sends; Validate checks the rules decoding
// does not (key length, weight range, required ids). Every error it returns
// wraps ErrInvalid.
type Request interface {
	Message
	Validate() error
}

// ForwardNow, as a request's Redirects, says that the client could not
// reach the master of the key's group itself: the node that receives it
// forwards it to the master unless it is the master (see Routed).
const ForwardNow = math.MaxUint8

// Routed is a request about one key, which the master of the key's group
// serves. A node that is not that master answers MASTER_REDIRECT with the
// master's address; the client follows it and counts the hop in
// Redirects. Once Redirects reaches the node's forwarding budget
// (forward_after, 2 by default, as WLock's client.redirect.maxtime) the
// node forwards the request to the master itself and relays the answer and
// the pushes that follow (Granted, Lost, WatchEvent) back. A client that
// cannot reach the master at all sends the request to any node with
// Redirects = ForwardNow. A request that arrived through a relay (a
// connection whose Hello carries Via) is never forwarded again.
type Routed interface {
	Request
	// RoutingKey is the key whose group serves the request.
	RoutingKey() string
	// RedirectCount returns the request's Redirects.
	RedirectCount() uint8
	// SetRedirectCount sets the request's Redirects.
	SetRedirectCount(n uint8)
}

func validateOwner(o Owner) error {
	if o.Client == 0 {
		return fmt.Errorf("%w: owner client id is 0", ErrInvalidField)
	}
	return nil
}

// Hello opens a relay's session: a node that forwards a client's requests
// to the master of their group names the client (namespace, id, key) and
// itself (Via), with no secret. The server answers Response{Status:
// SUCCESS, ViewVersion} or AUTH_FAILED; it accepts it only from the node
// Via names (its TLS client certificate, on the TLS client listener). A
// node whose peers run without TLS refuses it from anyone: relays there
// authenticate with a ScramClientFirst that sets Via and proves the
// cluster's relay secret. A client's Hello, carrying its secret in the clear,
// was protocol version 1's handshake and is refused: clients authenticate
// with SCRAM (ScramClientFirst). Until a handshake succeeds the server
// answers lock requests AUTH_FAILED.
//
// Why once per connection and not per request: requests stay small (no
// namespace string to send, decode and allocate on every acquire), the
// secret is checked once, the server computes KeyHash from the connection's
// namespace, and a registry can pick the cluster to describe from it. A
// client object serves one namespace, so nothing is lost; a process using
// two namespaces opens two clients. Owner identity, in contrast, is carried
// in every request, so that ownership survives reconnects and master
// changes and a node can relay a request to the master unchanged.
type Hello struct {
	// Namespace is the tenant; see ValidateNamespace.
	Namespace string
	// Secret was protocol version 1's clear secret. It is never sent now,
	// and a Hello that carries one is refused; the field stays so that
	// such a Hello decodes and is refused with a message that says why.
	Secret string
	// ClientID is the client's Owner.Client value: ClientIDOf(ClientKey). The server refuses requests on this connection whose
	// Owner.Client differs with AUTH_FAILED.
	ClientID uint64
	// Agent names the client library and version, for logs (may be empty).
	Agent string
	// Via is set by a node that relays requests for one of its clients to
	// the master of their group: the relaying node's id. It is 0 for
	// clients. Requests on a relay connection are never forwarded again,
	// so a stale view cannot send one around in a circle.
	Via uint32
	// ClientKey is the client's private key, MinClientKeyLen to
	// MaxClientKeyLen bytes, from which ClientID is derived (see
	// ClientIDOf): it proves the connection's right to act as ClientID's
	// owners. A client keeps it for its life, so that its holds survive
	// reconnects. Never log it.
	ClientKey string
}

func (*Hello) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Hello) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	n := 4 + optional(m.Via)
	if m.ClientKey != "" {
		n = 6
	}
	w.array(n)
	w.str(m.Namespace)
	w.str(m.Secret)
	w.uint(m.ClientID)
	w.str(m.Agent)
	if n > 4 {
		w.uint(uint64(m.Via))
	}
	if n > 5 {
		w.str(m.ClientKey)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Hello) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Hello{
		Namespace: f.str(),
		Secret:    f.str(),
		ClientID:  f.u64(),
		Agent:     f.str(),
		Via:       f.u32(),
		ClientKey: f.str(),
	}
	return f.done("Hello")
}

// Validate checks the namespace, the secret's length, that ClientID is
// nonzero and that ClientKey derives it (see ClientIDOf).
func (m *Hello) Validate() error {
	if err := ValidateNamespace(m.Namespace); err != nil {
		return err
	}
	if len(m.Secret) > MaxSecretLen {
		return fmt.Errorf("%w: secret of %d bytes, limit %d", ErrInvalidField, len(m.Secret), MaxSecretLen)
	}
	if m.ClientID == 0 {
		return fmt.Errorf("%w: client id is 0", ErrInvalidField)
	}
	if len(m.Agent) > MaxKeyLen {
		return fmt.Errorf("%w: agent of %d bytes", ErrInvalidField, len(m.Agent))
	}
	return validateClientKey(m.ClientKey, m.ClientID)
}

// Acquire asks for a lock on Key for Owner.
//
// Replies: SUCCESS with the new fencing Token; LOCK_OCCUPIED (try-lock,
// key held: holder, token, TTL left and queue length filled in; or key
// in a lock-delay: no holder, RetryAfterMs the delay left); LOCK_WAIT
// (blocking, queued: the outcome comes as a Granted push carrying WaitID);
// MASTER_REDIRECT, NO_MASTER, OVERLOADED, TIMEOUT, BAD_REQUEST,
// AUTH_FAILED, ERROR.
type Acquire struct {
	// Key is the lock's name within the connection's namespace.
	Key string
	// Owner is who will hold the lock.
	Owner Owner
	// Kind is exclusive, read or write.
	Kind Kind
	// Flags may hold FlagReentrant or FlagDowngrade.
	Flags Flags
	// Weight, MinWeight..MaxWeight, orders waiters: the server serves them
	// in order of arrival minus Weight × its weight_aging (1s by default),
	// so a heavier waiter goes first unless a lighter one has waited
	// longer than their weights' difference is worth.
	Weight uint8
	// TTLMs is how long the lock lives without a renewal, in milliseconds;
	// 0 asks for the server's default. The server enforces its bounds.
	TTLMs uint32
	// MaxWaitMs is how long the request may wait in the key's queue: 0 is a
	// try-lock (never queued), WaitForever has no deadline.
	MaxWaitMs uint32
	// WaitID names this wait in Granted and CancelWait: chosen by the
	// client, nonzero and unique within its ClientID when MaxWaitMs > 0,
	// and kept when the request is re-sent to a new master.
	WaitID uint64
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// Value is the holder value the grant carries (at most MaxValueLen
	// bytes, opaque to the server): returned by State, in LOCK_OCCUPIED
	// and in watch events. A reacquire replaces the holder's value. It is
	// a trailing field omitted when empty, so an older server ignores it.
	Value string
	// Permits is how many permits a semaphore acquire (Kind semaphore)
	// takes, at least 1 and at most Limit; 0 for locks. A trailing field.
	Permits uint32
	// Limit is the semaphore's permit total as the caller knows it: it
	// sets the total when the semaphore has no holders, and must equal
	// the total otherwise (BAD_REQUEST with Response.Permits the total
	// if not); with FlagSetPermits, the new total. A trailing field.
	Limit uint32
	// LockDelayMs is the grant's lock-delay, at most MaxLockDelayMs: when
	// the hold ends involuntarily (its TTL runs out, or an operator
	// force-unlocks it) the key is granted to nobody else for this long,
	// for resources that cannot check a fencing token. A normal release
	// frees the key at once. 0 (the default) is none. A trailing field
	// omitted when 0; a server that predates it ignores it.
	LockDelayMs uint32
}

func (*Acquire) wireMessage() {}

// RoutingKey implements Routed.
func (m *Acquire) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *Acquire) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *Acquire) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Acquire) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	n := 9 + optional(m.Redirects)
	if m.Value != "" {
		n = 11
	}
	if m.Permits != 0 || m.Limit != 0 {
		n = 13
	}
	if m.LockDelayMs != 0 {
		n = 14
	}
	w.array(n)
	w.str(m.Key)
	w.uint(m.Owner.Client)
	w.uint(m.Owner.ID)
	w.uint(uint64(m.Kind))
	w.uint(uint64(m.Flags))
	w.uint(uint64(m.Weight))
	w.uint(uint64(m.TTLMs))
	w.uint(uint64(m.MaxWaitMs))
	w.uint(m.WaitID)
	if n > 9 {
		w.uint(uint64(m.Redirects))
	}
	if n > 10 {
		w.bin(m.Value)
	}
	if n > 11 {
		w.uint(uint64(m.Permits))
		w.uint(uint64(m.Limit))
	}
	if n > 13 {
		w.uint(uint64(m.LockDelayMs))
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Acquire) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Acquire{
		Key:       f.str(),
		Owner:     Owner{Client: f.u64(), ID: f.u64()},
		Kind:      Kind(f.u8()),
		Flags:     Flags(f.u8()),
		Weight:    f.u8(),
		TTLMs:     f.u32(),
		MaxWaitMs: f.u32(),
		WaitID:    f.u64(),
		Redirects: f.u8(),
	}
	m.Value, _ = f.bin()
	m.Permits = f.u32()
	m.Limit = f.u32()
	m.LockDelayMs = f.u32()
	return f.done("Acquire")
}

// Blocking reports whether the request may wait in the queue.
func (m *Acquire) Blocking() bool { return m.MaxWaitMs > 0 }

// Validate checks the key, owner, kind and weight, and that a blocking
// acquire has a WaitID.
func (m *Acquire) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := validateOwner(m.Owner); err != nil {
		return err
	}
	if !m.Kind.Valid() {
		return fmt.Errorf("%w: %d", ErrInvalidKind, m.Kind)
	}
	if err := ValidateWeight(m.Weight); err != nil {
		return err
	}
	if m.Blocking() && m.WaitID == 0 {
		return fmt.Errorf("%w: blocking acquire with wait id 0", ErrInvalidField)
	}
	if m.Flags.Has(FlagDowngrade) && (m.Kind != KindRead || m.Blocking()) {
		return fmt.Errorf("%w: a downgrade is a non-blocking acquire of the read kind", ErrInvalidField)
	}
	if err := m.validatePermits(); err != nil {
		return err
	}
	if m.LockDelayMs > MaxLockDelayMs {
		return fmt.Errorf("%w: lock-delay %d ms, limit %d ms", ErrInvalidField, m.LockDelayMs, MaxLockDelayMs)
	}
	return ValidateValue(m.Value)
}

// validatePermits checks Permits and Limit against Kind and Flags.
func (m *Acquire) validatePermits() error {
	switch {
	case m.Kind != KindSemaphore:
		if m.Permits != 0 || m.Limit != 0 || m.Flags.Has(FlagSetPermits) {
			return fmt.Errorf("%w: permits, limit and FlagSetPermits are for semaphores", ErrInvalidField)
		}
	case m.Flags.Has(FlagSetPermits):
		if m.Blocking() || m.Limit == 0 || m.Permits != 0 {
			return fmt.Errorf("%w: a set-permits acquire is non-blocking, with limit >= 1 and permits 0", ErrInvalidField)
		}
	case m.Permits == 0 || m.Limit < m.Permits:
		return fmt.Errorf("%w: a semaphore acquire needs 1 <= permits <= limit (got %d of %d)", ErrInvalidField, m.Permits, m.Limit)
	}
	return nil
}

// Renew extends the lock Owner holds on Key with Token.
//
// Replies: SUCCESS (Token unchanged, TTLLeftMs the new TTL);
// LOCK_DELETED; LOCK_CHANGED_OWNER; TOKEN_ERROR; and the routing and
// overload statuses.
type Renew struct {
	// Key is the lock's name.
	Key string
	// Owner must be the holder.
	Owner Owner
	// Token must be the lock's current fencing token.
	Token uint64
	// TTLMs is the new TTL from now, in milliseconds; 0 keeps the lock's
	// current TTL.
	TTLMs uint32
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// SetValue asks to replace the holder's value with Value (which may
	// be empty, clearing it); without it the value is kept and Value is
	// ignored. SetValue and Value are trailing fields, omitted when both
	// are zero, which an older server skips.
	SetValue bool
	// Value is the new holder value (SetValue), at most MaxValueLen bytes.
	Value string
}

func (*Renew) wireMessage() {}

// RoutingKey implements Routed.
func (m *Renew) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *Renew) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *Renew) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Renew) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	n := 5 + optional(m.Redirects)
	if m.SetValue || m.Value != "" {
		n = 8
	}
	w.array(n)
	w.str(m.Key)
	w.uint(m.Owner.Client)
	w.uint(m.Owner.ID)
	w.uint(m.Token)
	w.uint(uint64(m.TTLMs))
	if n > 5 {
		w.uint(uint64(m.Redirects))
	}
	if n > 6 {
		w.boolean(m.SetValue)
		w.bin(m.Value)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Renew) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Renew{
		Key:       f.str(),
		Owner:     Owner{Client: f.u64(), ID: f.u64()},
		Token:     f.u64(),
		TTLMs:     f.u32(),
		Redirects: f.u8(),
		SetValue:  f.boolean(),
	}
	m.Value, _ = f.bin()
	return f.done("Renew")
}

// Validate checks the key, owner and value.
func (m *Renew) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := validateOwner(m.Owner); err != nil {
		return err
	}
	return ValidateValue(m.Value)
}

// Release frees the lock Owner holds on Key with Token; if the key has
// waiters, the same step grants it to the first of them.
//
// Replies: SUCCESS; LOCK_DELETED (already expired or released);
// LOCK_CHANGED_OWNER; TOKEN_ERROR; and the routing and overload statuses.
// On the last three the caller must assume the protected work may have
// overlapped another holder's.
type Release struct {
	// Key is the lock's name.
	Key string
	// Owner must be the holder.
	Owner Owner
	// Token must be the lock's current fencing token.
	Token uint64
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// HandOffID, when nonzero, asks for a hand-off (the client's local
	// queue): in the same command that releases the lock, grant it to
	// Owner{Client: Owner.Client, ID: HandOffID}, of the released hold's
	// kind, with HandOffTTLMs and holder value HandOffValue, if the key
	// then is free and nobody waits in the server's queue for it. The
	// reply is SUCCESS with Holder set to that owner and Token the new
	// hold's token when it was handed off; SUCCESS with Holder zero when
	// the lock was only released. A retry that finds the lock held by the
	// hand-off owner answers as if handed off. Trailing fields, omitted
	// when all three are zero; an older server ignores them and only
	// releases.
	HandOffID    uint64
	HandOffTTLMs uint32
	HandOffValue string
	// HandOffLockDelayMs is the hand-off grant's lock-delay (see
	// Acquire.LockDelayMs), at most MaxLockDelayMs. A trailing field after
	// the hand-off's, omitted when 0; a server that predates it ignores
	// it.
	HandOffLockDelayMs uint32
}

func (*Release) wireMessage() {}

// RoutingKey implements Routed.
func (m *Release) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *Release) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *Release) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Release) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	// The hand-off tail is written whole when any of its fields is set.
	tail := m.HandOffID != 0 || m.HandOffTTLMs != 0 || m.HandOffValue != "" || m.HandOffLockDelayMs != 0
	switch {
	case m.HandOffLockDelayMs != 0:
		w.array(9)
	case tail:
		w.array(8)
	default:
		w.array(4 + optional(m.Redirects))
	}
	w.str(m.Key)
	w.uint(m.Owner.Client)
	w.uint(m.Owner.ID)
	w.uint(m.Token)
	if tail {
		w.uint(uint64(m.Redirects))
		w.uint(m.HandOffID)
		w.uint(uint64(m.HandOffTTLMs))
		w.bin(m.HandOffValue)
		w.optionalUint(uint64(m.HandOffLockDelayMs))
		return w.err
	}
	w.optionalUint(uint64(m.Redirects))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Release) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Release{
		Key:       f.str(),
		Owner:     Owner{Client: f.u64(), ID: f.u64()},
		Token:     f.u64(),
		Redirects: f.u8(),
		HandOffID: f.u64(),
	}
	m.HandOffTTLMs = f.u32()
	m.HandOffValue, _ = f.bin()
	m.HandOffLockDelayMs = f.u32()
	return f.done("Release")
}

// Validate checks the key, the owner and a hand-off's value.
func (m *Release) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := validateOwner(m.Owner); err != nil {
		return err
	}
	if m.HandOffID != 0 && m.HandOffID == m.Owner.ID {
		return fmt.Errorf("%w: hand-off to the releasing owner", ErrInvalidField)
	}
	if m.HandOffLockDelayMs > MaxLockDelayMs {
		return fmt.Errorf("%w: hand-off lock-delay %d ms, limit %d ms", ErrInvalidField, m.HandOffLockDelayMs, MaxLockDelayMs)
	}
	return ValidateValue(m.HandOffValue)
}

// State asks for the state of Key, read from the master's applied state
// without a Paxos round.
//
// Replies: SUCCESS with Token, Holder, Kind, Readers, TTLLeftMs and
// QueueLen; LOCK_DELETED when the key is free (QueueLen may still be
// nonzero while a hand-off is in flight; RetryAfterMs, when not 0, is
// what is left of a lock-delay that keeps the key from being granted);
// and the routing statuses.
//
// With Token set it is a token check (CheckSequencer in Chubby's terms):
// when a hold of the key has that fencing token, the answer's Holder,
// Token, Value and TTLLeftMs are that hold's, so Response.Token == Token
// says the token is current; otherwise the answer is the plain State.
type State struct {
	// Key is the lock's name.
	Key string
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// Token, when not 0, asks about the hold with this fencing token (see
	// above). A trailing field omitted when 0; a server that predates it
	// ignores it and answers with the first holder.
	Token uint64
}

func (*State) wireMessage() {}

// RoutingKey implements Routed.
func (m *State) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *State) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *State) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *State) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	n := 1 + optional(m.Redirects)
	if m.Token != 0 {
		n = 3
	}
	w.array(n)
	w.str(m.Key)
	if n > 1 {
		w.uint(uint64(m.Redirects))
	}
	if n > 2 {
		w.uint(m.Token)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *State) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = State{Key: f.str(), Redirects: f.u8(), Token: f.u64()}
	return f.done("State")
}

// Validate checks the key.
func (m *State) Validate() error { return ValidateKey(m.Key) }

// Watch asks to be told when Key changes relative to Token, the token the
// watcher last saw (0 for none): the server pushes a WatchEvent with
// WatchID when the key is granted with a token above Token
// (EventAcquired), or the lock holding Token is released (EventReleased),
// expires (EventExpired) or is revoked (EventRevoked); if the key is already
// held above Token the event is pushed at once. Only the latest state is
// reported, not every step in between. Without FlagContinuous the watch
// ends with its first event; with it, the watch continues with Token
// advanced to each event's. When MaxWaitMs (0 or WaitForever: no deadline)
// passes, the server pushes EventTimeout and drops the watch.
//
// Replies: SUCCESS (registered); the routing and overload statuses.
// Watches live in the master's memory: after a reconnect or master change
// the client registers them again.
type Watch struct {
	// Key is the lock's name.
	Key string
	// WatchID names the watch in WatchEvent and Unwatch: chosen by the
	// client, nonzero, unique within its connection.
	WatchID uint64
	// Token is the last token the watcher knows of.
	Token uint64
	// Flags may hold FlagContinuous.
	Flags Flags
	// MaxWaitMs bounds the watch's life, in milliseconds.
	MaxWaitMs uint32
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
}

func (*Watch) wireMessage() {}

// RoutingKey implements Routed.
func (m *Watch) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *Watch) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *Watch) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Watch) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(5 + optional(m.Redirects))
	w.str(m.Key)
	w.uint(m.WatchID)
	w.uint(m.Token)
	w.uint(uint64(m.Flags))
	w.uint(uint64(m.MaxWaitMs))
	w.optionalUint(uint64(m.Redirects))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Watch) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Watch{
		Key:       f.str(),
		WatchID:   f.u64(),
		Token:     f.u64(),
		Flags:     Flags(f.u8()),
		MaxWaitMs: f.u32(),
		Redirects: f.u8(),
	}
	return f.done("Watch")
}

// Validate checks the key and that WatchID is nonzero.
func (m *Watch) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if m.WatchID == 0 {
		return fmt.Errorf("%w: watch id is 0", ErrInvalidField)
	}
	return nil
}

// Unwatch drops the watch WatchID on Key. Key routes the request to the
// key's group. Replies: SUCCESS, also when no such watch exists; the
// routing statuses.
type Unwatch struct {
	// Key is the watched key.
	Key string
	// WatchID is the Watch's id.
	WatchID uint64
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
}

func (*Unwatch) wireMessage() {}

// RoutingKey implements Routed.
func (m *Unwatch) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *Unwatch) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *Unwatch) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Unwatch) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(2 + optional(m.Redirects))
	w.str(m.Key)
	w.uint(m.WatchID)
	w.optionalUint(uint64(m.Redirects))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Unwatch) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Unwatch{Key: f.str(), WatchID: f.u64(), Redirects: f.u8()}
	return f.done("Unwatch")
}

// Validate checks the key and that WatchID is nonzero.
func (m *Unwatch) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if m.WatchID == 0 {
		return fmt.Errorf("%w: watch id is 0", ErrInvalidField)
	}
	return nil
}

// List asks the master of lock group Group for the locks held in the
// connection's namespace whose keys start with Prefix and sort after
// After (byte order), at most Limit of them, in key order. It is not
// forwarded: a node that does not master the group redirects. A client
// lists a namespace by asking every group and merging the answers; the
// next page starts after the last key it kept.
//
// Replies: SUCCESS with Locks (empty: none); routing statuses as usual.
type List struct {
	// Group is the lock group, 0..groups-1 (see GroupOf).
	Group uint32
	// Prefix selects keys; "" lists every key.
	Prefix string
	// After is the last key of the previous page ("" for the first).
	After string
	// Limit bounds the answer, 1..MaxListLimit; 0 asks for
	// DefaultListLimit.
	Limit uint32
}

// DefaultListLimit and MaxListLimit bound List.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

func (*List) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *List) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(4)
	w.uint(uint64(m.Group))
	w.str(m.Prefix)
	w.str(m.After)
	w.uint(uint64(m.Limit))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *List) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = List{Group: f.u32(), Prefix: f.str(), After: f.str(), Limit: f.u32()}
	return f.done("List")
}

// Validate checks the lengths of Prefix and After and the limit. The group
// is the server's to check (it knows the group count).
func (m *List) Validate() error {
	if len(m.Prefix) > MaxKeyLen || len(m.After) > MaxKeyLen {
		return fmt.Errorf("%w: list prefix or cursor longer than %d bytes", ErrInvalidKey, MaxKeyLen)
	}
	if m.Limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d above %d", ErrInvalidField, m.Limit, MaxListLimit)
	}
	return nil
}

// LockInfo is one held lock in a List answer.
type LockInfo struct {
	// Key is the lock's key.
	Key string
	// Holder is the holder (for a read lock, the first reader) and Token
	// its fencing token.
	Holder Owner
	Token  uint64
	// Kind is the held lock's kind; Readers how many owners hold it for
	// reading.
	Kind    Kind
	Readers uint32
	// TTLLeftMs is the time before the holder's lock expires, as the
	// master sees it.
	TTLLeftMs uint32
	// QueueLen is the number of waiters.
	QueueLen uint32
	// Value is the holder's holder value.
	Value string
	// Permits is, for a semaphore, the permits in use (List) or this
	// holder's permits (State's per-holder entries); Limit is its permit
	// total. Trailing fields, written only for semaphores.
	Permits uint32
	Limit   uint32
}

// CancelWait takes Owner's blocked acquire WaitID out of Key's queue, for a
// client whose caller gave up (context cancelled). Key routes the request.
//
// Replies: SUCCESS with Token 0 when the waiter was removed or was not
// queued. If the grant won the race, SUCCESS with Token set to the granted
// token (a Granted push was or will be sent too): the owner holds the lock
// and must release it. Routing statuses as usual.
type CancelWait struct {
	// Key is the key waited on.
	Key string
	// Owner is the waiting owner.
	Owner Owner
	// WaitID is the Acquire's WaitID.
	WaitID uint64
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
}

func (*CancelWait) wireMessage() {}

// RoutingKey implements Routed.
func (m *CancelWait) RoutingKey() string { return m.Key }

// RedirectCount implements Routed.
func (m *CancelWait) RedirectCount() uint8 { return m.Redirects }

// SetRedirectCount implements Routed.
func (m *CancelWait) SetRedirectCount(n uint8) { m.Redirects = n }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *CancelWait) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(4 + optional(m.Redirects))
	w.str(m.Key)
	w.uint(m.Owner.Client)
	w.uint(m.Owner.ID)
	w.uint(m.WaitID)
	w.optionalUint(uint64(m.Redirects))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *CancelWait) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = CancelWait{
		Key:       f.str(),
		Owner:     Owner{Client: f.u64(), ID: f.u64()},
		WaitID:    f.u64(),
		Redirects: f.u8(),
	}
	return f.done("CancelWait")
}

// Validate checks the key, owner and that WaitID is nonzero.
func (m *CancelWait) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := validateOwner(m.Owner); err != nil {
		return err
	}
	if m.WaitID == 0 {
		return fmt.Errorf("%w: wait id is 0", ErrInvalidField)
	}
	return nil
}

// Heartbeat keeps a connection alive and lets the client notice a stale
// view. Reply: Response{Status: SUCCESS, ViewVersion}.
type Heartbeat struct{}

func (*Heartbeat) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (*Heartbeat) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeArrayLen(0) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (*Heartbeat) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	return f.done("Heartbeat")
}

// Validate always succeeds.
func (*Heartbeat) Validate() error { return nil }

// GetView asks for the current cluster view. Reply: a View frame, or a
// Response on failure.
type GetView struct{}

func (*GetView) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (*GetView) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeArrayLen(0) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (*GetView) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	return f.done("GetView")
}

// Validate always succeeds.
func (*GetView) Validate() error { return nil }

// SubscribeView asks for the current cluster view and every later one.
// Reply: a View frame (or a Response on failure); then a ViewChanged push
// whenever the view's version rises, until the connection closes.
type SubscribeView struct{}

func (*SubscribeView) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (*SubscribeView) EncodeMsgpack(e *msgpack.Encoder) error { return e.EncodeArrayLen(0) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (*SubscribeView) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	return f.done("SubscribeView")
}

// Validate always succeeds.
func (*SubscribeView) Validate() error { return nil }

// Response is the reply to every request except a successful GetView or
// SubscribeView. Which fields are set depends on the request and status
// (see each request and Status); the rest are zero. It is encoded without
// its trailing zero fields, so a plain SUCCESS with a token takes a few
// bytes.
type Response struct {
	// Status is the outcome.
	Status Status
	// Token is the fencing token: of the lock just granted (Acquire), the
	// current holder's (LOCK_OCCUPIED, State).
	Token uint64
	// Holder is the lock's holder (LOCK_OCCUPIED, State; for a read lock,
	// one of the readers).
	Holder Owner
	// TTLLeftMs is the time left before the lock expires as the master
	// sees it, in milliseconds (LOCK_OCCUPIED, State, Renew).
	TTLLeftMs uint32
	// QueueLen is the number of waiters on the key (LOCK_OCCUPIED,
	// LOCK_WAIT, State).
	QueueLen uint32
	// Kind is the held lock's kind (State, LOCK_OCCUPIED).
	Kind Kind
	// Readers is how many owners hold a read lock on the key (State).
	Readers uint32
	// RetryAfterMs is how long to wait before retrying (OVERLOADED,
	// NO_MASTER), or what is left of a key's lock-delay (LOCK_OCCUPIED
	// without a holder, State).
	RetryAfterMs uint32
	// Redirect is the master's client address, host:port
	// (MASTER_REDIRECT).
	Redirect string
	// ViewVersion is the version of the server's cluster view (Hello,
	// Heartbeat): a client whose view is older fetches a new one.
	ViewVersion uint64
	// Msg is a human-readable detail (BAD_REQUEST, ERROR); not for
	// programs to parse.
	Msg string
	// Value is Holder's holder value (State, LOCK_OCCUPIED), empty when
	// it has none; a trailing field an older client skips.
	Value string
	// Locks is List's answer (at most MaxListLimit); a trailing field.
	// State of a semaphore answers one entry per holder here.
	Locks []LockInfo
	// Permits is a semaphore's permit total and InUse the permits held
	// (State, LOCK_OCCUPIED; Permits also in the BAD_REQUEST of an
	// acquire whose Limit is not the total); trailing fields.
	Permits uint32
	InUse   uint32
	// Tokens are a MultiAcquire's fencing tokens, one per key in the
	// request's order (SUCCESS); a trailing field.
	Tokens []uint64
	// KeyIndex is the index in a MultiAcquire's Keys of the key that made
	// it fail (LOCK_OCCUPIED); a trailing field.
	KeyIndex uint32
}

func (*Response) wireMessage() {}

// responseFields is how many fields r needs: up to its last nonzero one.
func (m *Response) responseFields() int {
	switch {
	case m.KeyIndex != 0:
		return 18
	case len(m.Tokens) > 0:
		return 17
	case m.InUse != 0:
		return 16
	case m.Permits != 0:
		return 15
	case len(m.Locks) > 0:
		return 14
	case m.Value != "":
		return 13
	case m.Msg != "":
		return 12
	case m.ViewVersion != 0:
		return 11
	case m.Redirect != "":
		return 10
	case m.RetryAfterMs != 0:
		return 9
	case m.Readers != 0:
		return 8
	case m.Kind != 0:
		return 7
	case m.QueueLen != 0:
		return 6
	case m.TTLLeftMs != 0:
		return 5
	case m.Holder.ID != 0:
		return 4
	case m.Holder.Client != 0:
		return 3
	case m.Token != 0:
		return 2
	}
	return 1
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Response) EncodeMsgpack(e *msgpack.Encoder) error {
	n := m.responseFields()
	w := fieldWriter{e: e}
	w.array(n)
	w.uint(uint64(m.Status))
	if n == 1 {
		return w.err
	}
	w.uint(m.Token)
	if n == 2 {
		return w.err
	}
	fields := [...]uint64{
		m.Holder.Client, m.Holder.ID, uint64(m.TTLLeftMs), uint64(m.QueueLen),
		uint64(m.Kind), uint64(m.Readers), uint64(m.RetryAfterMs),
	}
	for i := 0; i < len(fields) && i < n-2; i++ {
		w.uint(fields[i])
	}
	if n > 9 {
		w.str(m.Redirect)
	}
	if n > 10 {
		w.uint(m.ViewVersion)
	}
	if n > 11 {
		w.str(m.Msg)
	}
	if n > 12 {
		w.bin(m.Value)
	}
	if n > 13 {
		w.array(len(m.Locks))
		for i := range m.Locks {
			l := &m.Locks[i]
			ln := 9
			if l.Permits != 0 || l.Limit != 0 {
				ln = 11
			}
			w.array(ln)
			w.str(l.Key)
			w.uint(l.Holder.Client)
			w.uint(l.Holder.ID)
			w.uint(l.Token)
			w.uint(uint64(l.Kind))
			w.uint(uint64(l.Readers))
			w.uint(uint64(l.TTLLeftMs))
			w.uint(uint64(l.QueueLen))
			w.bin(l.Value)
			if ln > 9 {
				w.uint(uint64(l.Permits))
				w.uint(uint64(l.Limit))
			}
		}
	}
	if n > 14 {
		w.uint(uint64(m.Permits))
	}
	if n > 15 {
		w.uint(uint64(m.InUse))
	}
	if n > 16 {
		w.array(len(m.Tokens))
		for _, t := range m.Tokens {
			w.uint(t)
		}
	}
	if n > 17 {
		w.uint(uint64(m.KeyIndex))
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Response) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Response{
		Status:       Status(f.u8()),
		Token:        f.u64(),
		Holder:       Owner{Client: f.u64(), ID: f.u64()},
		TTLLeftMs:    f.u32(),
		QueueLen:     f.u32(),
		Kind:         Kind(f.u8()),
		Readers:      f.u32(),
		RetryAfterMs: f.u32(),
		Redirect:     f.str(),
		ViewVersion:  f.u64(),
		Msg:          f.str(),
	}
	m.Value, _ = f.bin()
	if n := f.list(MaxListLimit); n > 0 {
		m.Locks = make([]LockInfo, n)
		for i := range m.Locks {
			g := readFields(d)
			l := LockInfo{Key: g.str(), Holder: Owner{Client: g.u64(), ID: g.u64()}, Token: g.u64(),
				Kind: Kind(g.u8()), Readers: g.u32(), TTLLeftMs: g.u32(), QueueLen: g.u32()}
			l.Value, _ = g.bin()
			l.Permits, l.Limit = g.u32(), g.u32()
			if err := g.done("Response lock"); err != nil {
				*m = Response{}
				return err
			}
			m.Locks[i] = l
		}
	}
	m.Permits, m.InUse = f.u32(), f.u32()
	if n := f.list(MaxMultiKeys); n > 0 {
		m.Tokens = make([]uint64, n)
		for i := range m.Tokens {
			m.Tokens[i] = f.elemU64()
		}
	}
	m.KeyIndex = f.u32()
	return f.done("Response")
}

// View is the cluster view: which node masters each group and where nodes
// listen for clients. Its version rises with every change; a client keeps
// the highest version it has seen and ignores older ones. The group count
// is len(Groups), and a key's group is GroupOf(KeyHash(ns, key),
// len(Groups)).
type View struct {
	// Version orders views.
	Version uint64
	// Groups lists every group, indexed by group number.
	Groups []GroupView
	// Nodes lists the cluster's members.
	Nodes []NodeView
}

// GroupView is one group's entry in a View.
type GroupView struct {
	// Master is the master's node id, 0 when the group has none.
	Master uint32
	// Addr is the master's client address, host:port ("" when none).
	Addr string
	// Epoch rises with every change of the group's master.
	Epoch uint64
}

// NodeView is one node's entry in a View.
type NodeView struct {
	// ID is the node id, nonzero.
	ID uint32
	// Addr is the node's client address, host:port.
	Addr string
	// Alive is the membership layer's opinion: a hint, not a promise.
	Alive bool
}

func (*View) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *View) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(3)
	w.uint(m.Version)
	w.array(len(m.Groups))
	for i := range m.Groups {
		g := &m.Groups[i]
		w.array(3)
		w.uint(uint64(g.Master))
		w.str(g.Addr)
		w.uint(g.Epoch)
	}
	w.array(len(m.Nodes))
	for i := range m.Nodes {
		n := &m.Nodes[i]
		w.array(3)
		w.uint(uint64(n.ID))
		w.str(n.Addr)
		w.boolean(n.Alive)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder. Lists longer than
// MaxViewGroups or MaxViewNodes are ErrMalformed.
func (m *View) DecodeMsgpack(d *msgpack.Decoder) error {
	*m = View{}
	f := readFields(d)
	m.Version = f.u64()
	if n := f.list(MaxViewGroups); n > 0 {
		m.Groups = make([]GroupView, n)
		for i := range m.Groups {
			g := readFields(d)
			m.Groups[i] = GroupView{Master: g.u32(), Addr: g.str(), Epoch: g.u64()}
			if err := g.done("View group"); err != nil {
				*m = View{}
				return err
			}
		}
	}
	if n := f.list(MaxViewNodes); n > 0 {
		m.Nodes = make([]NodeView, n)
		for i := range m.Nodes {
			g := readFields(d)
			m.Nodes[i] = NodeView{ID: g.u32(), Addr: g.str(), Alive: g.boolean()}
			if err := g.done("View node"); err != nil {
				*m = View{}
				return err
			}
		}
	}
	if err := f.done("View"); err != nil {
		*m = View{}
		return err
	}
	return nil
}

// GroupCount returns the number of groups, len(Groups).
func (m *View) GroupCount() int { return len(m.Groups) }

// MasterAddr returns the client address of group g's master, and false if
// g is out of range or the group has no master.
func (m *View) MasterAddr(g int) (string, bool) {
	if g < 0 || g >= len(m.Groups) || m.Groups[g].Master == 0 || m.Groups[g].Addr == "" {
		return "", false
	}
	return m.Groups[g].Addr, true
}

// Granted is pushed (request id 0) to a waiter whose blocking Acquire
// ended: Status SUCCESS means Owner now holds Key with Token; TIMEOUT means
// MaxWaitMs passed and the waiter left the queue. It is sent on the
// connection the Acquire (or its latest re-send) arrived on.
//
// The lock's TTL counts on the master from the moment it applied the
// grant, which the waiter cannot observe: the push may arrive late. TTLMs
// tells the waiter the TTL the master applied (the Acquire's TTLMs clamped
// to the server's bounds); when it is counted from is the client's
// business (see the client package's validity rule). A server older than
// this field sends no TTLMs (decoded as 0): the TTL is then unknown.
type Granted struct {
	// WaitID is the Acquire's WaitID.
	WaitID uint64
	// Key is the lock's name.
	Key string
	// Status is SUCCESS or TIMEOUT.
	Status Status
	// Token is the new fencing token (SUCCESS).
	Token uint64
	// Owner is the waiter's owner.
	Owner Owner
	// TTLMs is the TTL the master applied to the grant, in milliseconds
	// (SUCCESS): the requested TTL within the server's bounds. 0 means
	// unknown (a server that predates the field); it is omitted from the
	// encoding when 0.
	TTLMs uint32
}

func (*Granted) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Granted) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(6 + optional(m.TTLMs))
	w.uint(m.WaitID)
	w.str(m.Key)
	w.uint(uint64(m.Status))
	w.uint(m.Token)
	w.uint(m.Owner.Client)
	w.uint(m.Owner.ID)
	w.optionalUint(uint64(m.TTLMs))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Granted) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Granted{
		WaitID: f.u64(),
		Key:    f.str(),
		Status: Status(f.u8()),
		Token:  f.u64(),
		Owner:  Owner{Client: f.u64(), ID: f.u64()},
		TTLMs:  f.u32(),
	}
	return f.done("Granted")
}

// Lost is pushed (request id 0) to a holder whose lock on Key with Token
// is gone without its asking: Event is EventExpired or EventRevoked. It is
// best effort (the holder may be disconnected); a client also counts the
// TTL down on its own clock.
type Lost struct {
	// Key is the lock's name.
	Key string
	// Token is the lost lock's fencing token.
	Token uint64
	// Owner was the holder.
	Owner Owner
	// Event says why.
	Event Event
}

func (*Lost) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *Lost) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(5)
	w.str(m.Key)
	w.uint(m.Token)
	w.uint(m.Owner.Client)
	w.uint(m.Owner.ID)
	w.uint(uint64(m.Event))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Lost) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Lost{
		Key:   f.str(),
		Token: f.u64(),
		Owner: Owner{Client: f.u64(), ID: f.u64()},
		Event: Event(f.u8()),
	}
	return f.done("Lost")
}

// WatchEvent is pushed (request id 0) to a watcher when its key changed;
// see Watch.
type WatchEvent struct {
	// WatchID is the Watch's id.
	WatchID uint64
	// Key is the watched key.
	Key string
	// Event says what happened.
	Event Event
	// Token is the key's token after the event (EventAcquired) or the
	// token of the lock that ended.
	Token uint64
	// Holder is the new holder (EventAcquired), else zero.
	Holder Owner
	// Value is the new holder's value (EventAcquired), empty when it has
	// none; a trailing field omitted when empty. A change of value by the
	// same holder (Renew with SetValue) is reported as EventAcquired with
	// the same Token to continuous watchers.
	Value string
}

func (*WatchEvent) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *WatchEvent) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	n := 6
	if m.Value != "" {
		n = 7
	}
	w.array(n)
	w.uint(m.WatchID)
	w.str(m.Key)
	w.uint(uint64(m.Event))
	w.uint(m.Token)
	w.uint(m.Holder.Client)
	w.uint(m.Holder.ID)
	if n > 6 {
		w.bin(m.Value)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *WatchEvent) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = WatchEvent{
		WatchID: f.u64(),
		Key:     f.str(),
		Event:   Event(f.u8()),
		Token:   f.u64(),
		Holder:  Owner{Client: f.u64(), ID: f.u64()},
	}
	m.Value, _ = f.bin()
	return f.done("WatchEvent")
}

// Compile-time checks that every request type validates.
var (
	_ Request = (*Hello)(nil)
	_ Request = (*Acquire)(nil)
	_ Request = (*Renew)(nil)
	_ Request = (*Release)(nil)
	_ Request = (*State)(nil)
	_ Request = (*Watch)(nil)
	_ Request = (*Unwatch)(nil)
	_ Request = (*CancelWait)(nil)
	_ Request = (*Heartbeat)(nil)
	_ Request = (*GetView)(nil)
	_ Request = (*SubscribeView)(nil)
)
