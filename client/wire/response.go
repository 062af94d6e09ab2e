// This file holds Response, the reply to every request.

package wire

import (
	"github.com/vmihailenco/msgpack/v5"
)

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
	// More says a List answer stopped short of its Limit to stay under
	// the frame limit: the group has more locks after its last key. A
	// trailing field; an older client, which skips it, sees a short page.
	More bool
}

func (*Response) wireMessage() {}

// responseFields is how many fields r needs: up to its last nonzero one.
func (m *Response) responseFields() int {
	switch {
	case m.More:
		return 19
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
	if n > 18 {
		w.uint(1) // More
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
	m.More = f.u32() != 0
	return f.done("Response")
}
