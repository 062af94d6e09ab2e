package apiserver

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// ownerDomain and keyDomain separate the hashes of API owners and client
// keys from any other use of SHA-256 over the same bytes.
const (
	ownerDomain = "paxlock api owner v1\x00"
	keyDomain   = "paxlock api client key v1\x00"
)

// clientKeyOf is the client key of namespace ns's API sessions: the same
// on every node, so that an owner string is the same wire owner wherever
// it is used. Whoever knows the namespace's secret may act as any API
// owner whose string it knows: an API owner string is a bearer
// credential within its namespace, like the value of Redis's SET NX.
func clientKeyOf(ns string) string {
	sum := sha256.Sum256([]byte(keyDomain + ns))
	return "api:" + hex.EncodeToString(sum[:24])
}

// ownerOf is the wire owner of API owner string owner in the namespace
// whose API client id is client: 64 bits of SHA-256 over a domain string
// and the owner (1 if they are all zero).
func ownerOf(client uint64, owner string) wire.Owner {
	sum := sha256.Sum256([]byte(ownerDomain + owner))
	id := binary.BigEndian.Uint64(sum[:8])
	if id == 0 {
		id = 1
	}
	return wire.Owner{Client: client, ID: id}
}

// kindOf is the wire kind of an API lock kind.
func kindOf(k paxlockv1.LockKind) (wire.Kind, bool) {
	switch k {
	case paxlockv1.LockKind_LOCK_KIND_UNSPECIFIED, paxlockv1.LockKind_LOCK_KIND_EXCLUSIVE:
		return wire.KindExclusive, true
	case paxlockv1.LockKind_LOCK_KIND_READ:
		return wire.KindRead, true
	case paxlockv1.LockKind_LOCK_KIND_WRITE:
		return wire.KindWrite, true
	case paxlockv1.LockKind_LOCK_KIND_SEMAPHORE:
		return wire.KindSemaphore, true
	}
	return 0, false
}

// apiKind is the API lock kind of a wire kind.
func apiKind(k wire.Kind) paxlockv1.LockKind {
	switch k {
	case wire.KindRead:
		return paxlockv1.LockKind_LOCK_KIND_READ
	case wire.KindWrite:
		return paxlockv1.LockKind_LOCK_KIND_WRITE
	case wire.KindSemaphore:
		return paxlockv1.LockKind_LOCK_KIND_SEMAPHORE
	}
	return paxlockv1.LockKind_LOCK_KIND_EXCLUSIVE
}

// holderName is how the API names a holder: client/id in hex, "" for
// nobody.
func holderName(o wire.Owner) string {
	if o.IsZero() {
		return ""
	}
	return o.String()
}

// lockState is the API's LockState of a State (or LOCK_OCCUPIED) answer;
// owner, when not zero, is the owner asked about (is_owner).
func lockState(r *wire.Response, owner wire.Owner) *paxlockv1.LockState {
	st := &paxlockv1.LockState{
		Held:      r.Status == wire.StatusSuccess || r.Status == wire.StatusLockOccupied && !r.Holder.IsZero(),
		QueueLen:  r.QueueLen,
		Permits:   r.Permits,
		InUse:     r.InUse,
		Readers:   r.Readers,
		TtlLeftMs: r.TTLLeftMs,
	}
	if !st.Held {
		st.LockDelayLeftMs = r.RetryAfterMs
		st.TtlLeftMs = 0
		return st
	}
	st.Kind, st.Token, st.Holder = apiKind(r.Kind), r.Token, holderName(r.Holder)
	if r.Value != "" {
		st.Value = []byte(r.Value)
	}
	if !owner.IsZero() {
		st.IsOwner = r.Holder == owner
		for i := range r.Locks {
			st.IsOwner = st.IsOwner || r.Locks[i].Holder == owner
		}
	}
	return st
}

// eventKind is the API's kind of a watch event. A hold ended at its
// maximum hold time (wire.EventHoldLimit) is a revocation, with the
// events' max_hold set (maxHold): a client that knows no max_hold still
// sees its hold end.
func eventKind(e wire.Event) paxlockv1.WatchEventKind {
	switch e {
	case wire.EventAcquired:
		return paxlockv1.WatchEventKind_WATCH_EVENT_KIND_ACQUIRED
	case wire.EventReleased:
		return paxlockv1.WatchEventKind_WATCH_EVENT_KIND_RELEASED
	case wire.EventExpired:
		return paxlockv1.WatchEventKind_WATCH_EVENT_KIND_EXPIRED
	case wire.EventRevoked, wire.EventHoldLimit:
		return paxlockv1.WatchEventKind_WATCH_EVENT_KIND_REVOKED
	case wire.EventTimeout:
		return paxlockv1.WatchEventKind_WATCH_EVENT_KIND_TIMEOUT
	}
	return paxlockv1.WatchEventKind_WATCH_EVENT_KIND_UNSPECIFIED
}

// maxHold reports whether e ended a hold at its maximum hold time: the
// max_hold of the API's events.
func maxHold(e wire.Event) bool { return e == wire.EventHoldLimit }

// watchEvent is the API's event of a watch's push.
func watchEvent(ev *wire.WatchEvent) *paxlockv1.WatchEvent {
	out := &paxlockv1.WatchEvent{Key: ev.Key, Kind: eventKind(ev.Event), Token: ev.Token, Holder: holderName(ev.Holder), MaxHold: maxHold(ev.Event)}
	if ev.Value != "" {
		out.Value = []byte(ev.Value)
	}
	return out
}

// validityMs is how long after its send a caller may count a hold of
// ttlMs valid: the TTL less the clock-drift margin (docs/design.md, I9).
func validityMs(ttlMs uint32, drift float64) uint32 {
	return uint32(float64(ttlMs) * (1 - drift))
}
