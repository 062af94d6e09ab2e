// This file holds the messages a server pushes unasked (request id 0):
// Granted, Lost and WatchEvent.

package wire

import (
	"github.com/vmihailenco/msgpack/v5"
)

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
	// same holder (Renew with SetValue), or of the permits of its
	// semaphore hold (a Release keeping some, Release.KeepPermits), is
	// reported as EventAcquired with the same Token to continuous
	// watchers.
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
