// This file holds the requests that read or follow state without changing
// a lock: State, Watch, Unwatch, List, CancelWait, Heartbeat, GetView and
// SubscribeView.

package wire

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// State asks for the state of Key, read from the master's applied state
// without a Paxos round.
//
// Replies: SUCCESS with Token, Holder, Kind, Readers, TTLLeftMs and
// QueueLen; LOCK_DELETED when the key is free (QueueLen may still be
// nonzero while a grant to a waiter is in flight; RetryAfterMs, when not 0, is
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
// the client registers them again, and so when the master pushes
// EventMoved (it dropped the watch without a change of the key).
//
// With FlagPrefix the watch is a prefix watch, sent to the master of lock
// group Group (another node redirects, or forwards it as any Routed
// request, by Group rather than Key): Key is a
// prefix ("" for the whole namespace) and the master pushes a WatchEvent,
// whose Key names the key, for every acquire, release, expiry and
// revocation of a key of the connection's namespace with that prefix on
// the group, from the registration on (no event for the present state;
// Token is ignored). It is continuous whatever FlagContinuous says and
// MaxWaitMs must be 0; it ends with an Unwatch carrying FlagPrefix and
// Group, with the connection, or with EventMoved (step-down, namespace
// moved) after which the client registers it with the group's next
// master. A client watching a prefix registers with every group. OVERLOADED
// beyond the server's bounds on prefix watches per connection and per
// namespace.
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
	// Group is a prefix watch's lock group, 0..groups-1 (see GroupOf). A
	// trailing field, written (with Redirects) only when not 0.
	Group uint32
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
	n := 5 + optional(m.Redirects)
	if m.Group != 0 {
		n = 7
	}
	w.array(n)
	w.str(m.Key)
	w.uint(m.WatchID)
	w.uint(m.Token)
	w.uint(uint64(m.Flags))
	w.uint(uint64(m.MaxWaitMs))
	if n > 5 {
		w.uint(uint64(m.Redirects))
	}
	if n > 6 {
		w.uint(uint64(m.Group))
	}
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
		Group:     f.u32(),
	}
	return f.done("Watch")
}

// Validate checks the key (a prefix watch's may be empty), that WatchID
// is nonzero and that a prefix watch has no MaxWaitMs. The group is the
// server's to check (it knows the group count).
func (m *Watch) Validate() error {
	if err := validateWatchKey(m.Key, m.Flags); err != nil {
		return err
	}
	if m.WatchID == 0 {
		return fmt.Errorf("%w: watch id is 0", ErrInvalidField)
	}
	if m.Flags.Has(FlagPrefix) && m.MaxWaitMs != 0 {
		return fmt.Errorf("%w: a prefix watch has no max wait", ErrInvalidField)
	}
	return nil
}

// validateWatchKey checks a watch's key: a key, or with FlagPrefix a
// prefix of at most MaxKeyLen bytes ("" for the whole namespace).
func validateWatchKey(key string, flags Flags) error {
	if !flags.Has(FlagPrefix) {
		return ValidateKey(key)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: prefix of %d bytes, limit %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// Unwatch drops the watch WatchID on Key. Key routes the request to the
// key's group; with FlagPrefix it drops the prefix watch WatchID of lock
// group Group instead, sent to that group's master (Key is the prefix,
// informational). Replies: SUCCESS, also when no such watch exists; the
// routing statuses.
type Unwatch struct {
	// Key is the watched key (or prefix).
	Key string
	// WatchID is the Watch's id.
	WatchID uint64
	// Redirects counts the MASTER_REDIRECTs this request followed, or is
	// ForwardNow; see Routed.
	Redirects uint8
	// Flags may hold FlagPrefix; Group is then the prefix watch's group.
	// Trailing fields, each written (with those before it) only when it
	// or a later one is not 0.
	Flags Flags
	Group uint32
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
	n := 2 + optional(m.Redirects)
	if m.Flags != 0 {
		n = 4
	}
	if m.Group != 0 {
		n = 5
	}
	w.array(n)
	w.str(m.Key)
	w.uint(m.WatchID)
	if n > 2 {
		w.uint(uint64(m.Redirects))
	}
	if n > 3 {
		w.uint(uint64(m.Flags))
	}
	if n > 4 {
		w.uint(uint64(m.Group))
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *Unwatch) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	*m = Unwatch{Key: f.str(), WatchID: f.u64(), Redirects: f.u8(), Flags: Flags(f.u8()), Group: f.u32()}
	return f.done("Unwatch")
}

// Validate checks the key (a prefix watch's may be empty) and that
// WatchID is nonzero.
func (m *Unwatch) Validate() error {
	if err := validateWatchKey(m.Key, m.Flags); err != nil {
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
// Replies: SUCCESS with Locks (empty: none), and More set when the page
// stopped short of Limit to stay under the frame limit (the group has
// more locks after its last one: a merged page must end there);
// OVERLOADED with RetryAfterMs over the namespace's rate quota, which a
// List counts against by the keys it matches; routing statuses as usual.
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
