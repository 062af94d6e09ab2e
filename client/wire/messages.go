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
	// The fields are declared in the order that packs the struct (an
	// untraced Acquire fits 96 bytes); the wire order is the encoder's,
	// as doc.go lists it.
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
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// TTLMs is how long the lock lives without a renewal, in milliseconds;
	// 0 asks for the server's default. The server enforces its bounds.
	TTLMs uint32
	// MaxWaitMs is how long the request may wait in the key's queue: 0 is a
	// try-lock (never queued), WaitForever has no deadline.
	MaxWaitMs uint32
	// Permits is how many permits a semaphore acquire (Kind semaphore)
	// takes, at least 1 and at most Limit; 0 for locks. A trailing field.
	Permits uint32
	// WaitID names this wait in Granted and CancelWait: chosen by the
	// client, nonzero and unique within its ClientID when MaxWaitMs > 0,
	// and kept when the request is re-sent to a new master.
	WaitID uint64
	// Value is the holder value the grant carries (at most MaxValueLen
	// bytes, opaque to the server): returned by State, in LOCK_OCCUPIED
	// and in watch events. A reacquire replaces the holder's value. It is
	// a trailing field omitted when empty, so an older server ignores it.
	Value string
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
	// WaitedMs is how long this wait has already waited elsewhere, in
	// milliseconds, measured on the client's monotonic clock from its
	// first send: set when a blocking acquire is re-sent to a new master
	// (a master change, a namespace moved to another cluster). The master
	// queues the re-sent wait as if it had arrived WaitedMs before it came,
	// so the queue keeps the weight-then-arrival order it had before the
	// change. Like Weight it is the client's word: a namespace's clients
	// are trusted with their order. A trailing field omitted when 0.
	WaitedMs uint32
	// MaxHoldMs bounds how long the grant may be held, renewals or not,
	// in milliseconds (at most MaxHoldLimitMs, and not below TTLMs when
	// both are set; 0, the default, is no bound): the master ends the
	// hold that long after it granted it (a new master, that long after
	// it took over) as it ends an expired one, with lock-delay, and pushes
	// Lost EventHoldLimit. The client treats the hold as lost no later
	// than its send time plus MaxHoldMs. A trailing field after Trace,
	// omitted when 0 (Trace is then written empty when unset).
	MaxHoldMs uint32
	// Trace is the client span's trace context (see TraceContext): the
	// node's spans for this request join that trace. A trailing field
	// omitted when nil or zero, so an untraced acquire's frame is
	// unchanged. A pointer: an untraced Acquire stays in its allocation
	// size class, and decoding one allocates nothing for it.
	Trace *TraceContext
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
	if m.WaitedMs != 0 {
		n = 15
	}
	if !m.Trace.IsZero() {
		n = 16
	}
	if m.MaxHoldMs != 0 {
		n = 17
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
	if n > 14 {
		w.uint(uint64(m.WaitedMs))
	}
	if n > 15 {
		w.optionalTrace(m.Trace)
	}
	if n > 16 {
		w.uint(uint64(m.MaxHoldMs))
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
	m.WaitedMs = f.u32()
	m.Trace = f.trace()
	m.MaxHoldMs = f.u32()
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
	if err := ValidateMaxHold(m.MaxHoldMs, m.TTLMs); err != nil {
		return err
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
	// PassOnID, when nonzero, asks for a pass-on (the client's local
	// queue): in the same command that releases the lock, grant it to
	// Owner{Client: Owner.Client, ID: PassOnID}, of the released hold's
	// kind, with PassOnTTLMs and holder value PassOnValue, if the key
	// then is free and nobody waits in the server's queue for it. The
	// reply is SUCCESS with Holder set to that owner and Token the new
	// hold's token when it was handed off; SUCCESS with Holder zero when
	// the lock was only released. A retry that finds the lock held by the
	// pass-on owner answers as if handed off. Trailing fields, omitted
	// when all three are zero; an older server ignores them and only
	// releases.
	PassOnID    uint64
	PassOnTTLMs uint32
	PassOnValue string
	// PassOnLockDelayMs is the pass-on grant's lock-delay (see
	// Acquire.LockDelayMs), at most MaxLockDelayMs. A trailing field after
	// the pass-on's, omitted when 0; a server that predates it ignores
	// it.
	PassOnLockDelayMs uint32
	// KeepPermits, when nonzero, makes the release partial: the owner's
	// semaphore hold keeps KeepPermits of its permits and gives the rest
	// back (granting waiters that then fit, in the same command), with
	// its token, TTL and deadline unchanged. It names what is left, so a
	// retry changes nothing more. SUCCESS carries the permits kept in
	// Response.Permits; keeping all the hold has is SUCCESS unchanged;
	// keeping more, or a hold that is not a semaphore's, is BAD_REQUEST
	// (Response.Permits: the permits held) and changes nothing. Not with
	// a pass-on. A trailing field after Trace (written empty when the
	// release is untraced), omitted when 0; a server that predates it
	// ignores it and releases the whole hold (its SUCCESS has no
	// Permits). It sits beside PassOnLockDelayMs in what would be
	// padding, which keeps Release in its allocation size class.
	KeepPermits uint32
	// Trace is the client span's trace context (see Acquire.Trace): the
	// release's grant to a waiter shows in the release's trace. A
	// trailing field after PassOnLockDelayMs, omitted when nil or zero.
	Trace *TraceContext
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
	// The pass-on tail is written whole when any of its fields is set.
	traced, keep := !m.Trace.IsZero(), m.KeepPermits != 0
	tail := keep || traced || m.PassOnID != 0 || m.PassOnTTLMs != 0 || m.PassOnValue != "" || m.PassOnLockDelayMs != 0
	switch {
	case keep:
		w.array(11)
	case traced:
		w.array(10)
	case m.PassOnLockDelayMs != 0:
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
		w.uint(m.PassOnID)
		w.uint(uint64(m.PassOnTTLMs))
		w.bin(m.PassOnValue)
		if keep {
			w.uint(uint64(m.PassOnLockDelayMs))
			w.optionalTrace(m.Trace)
			w.uint(uint64(m.KeepPermits))
			return w.err
		}
		if traced {
			w.uint(uint64(m.PassOnLockDelayMs))
			w.trace(m.Trace)
			return w.err
		}
		w.optionalUint(uint64(m.PassOnLockDelayMs))
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
		PassOnID:  f.u64(),
	}
	m.PassOnTTLMs = f.u32()
	m.PassOnValue, _ = f.bin()
	m.PassOnLockDelayMs = f.u32()
	m.Trace = f.trace()
	m.KeepPermits = f.u32()
	return f.done("Release")
}

// Validate checks the key, the owner, a pass-on's value and that a
// partial release has no pass-on.
func (m *Release) Validate() error {
	if err := ValidateKey(m.Key); err != nil {
		return err
	}
	if err := validateOwner(m.Owner); err != nil {
		return err
	}
	if m.KeepPermits != 0 && m.PassOnID != 0 {
		return fmt.Errorf("%w: a partial release with a pass-on", ErrInvalidField)
	}
	if m.PassOnID != 0 && m.PassOnID == m.Owner.ID {
		return fmt.Errorf("%w: pass-on to the releasing owner", ErrInvalidField)
	}
	if m.PassOnLockDelayMs > MaxLockDelayMs {
		return fmt.Errorf("%w: pass-on lock-delay %d ms, limit %d ms", ErrInvalidField, m.PassOnLockDelayMs, MaxLockDelayMs)
	}
	return ValidateValue(m.PassOnValue)
}
