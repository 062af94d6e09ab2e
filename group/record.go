package group

import (
	"encoding/binary"
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// holder is one owner's hold on a key: what every replica applies. The
// master's deadline for it is its worker's (see holdSlot).
type holder struct {
	owner wire.Owner
	token uint64
	ttlMs uint32
	kind  wire.Kind // the hold's kind; all holds of a key have the same
	used  bool      // set on every hold in a record (see lockRec.first)
}

// lockRec is a key's lock: a writer (kind exclusive or write) or readers.
// The first hold is inline; the rest (more readers) and the holds' values
// are out of line in x, so the common held key without a value costs one
// 48-byte object besides its map entry. A record with no hold (first.used
// false) exists only inside apply.
type lockRec struct {
	// x comes first: the collector scans an object up to its last
	// pointer, so a record is scanned for 8 of its 48 bytes.
	x     *recExt
	first holder
	// gen tells this record from any other its key had or will have on
	// this node, for the master's deadline slots (holdSlot.gen): its
	// shard stamps it when the record enters the table (shard.stamp).
	// Node-local, never replicated nor read by apply; it fills what
	// would be the object's padding.
	gen uint32
}

// recExt is the out-of-line part of a lockRec, nil when the key has one
// hold without a value.
type recExt struct {
	more []holder // holds after the first
	// vals[i] is hold i's value (0 is first); holds at or past len(vals)
	// have none. Trailing empty values are trimmed.
	vals []string
	// A semaphore's record (kind semaphore) has its permit total in limit
	// and hold i's permits in perm[i] (len(perm) == n()); see
	// semaphore.go.
	limit uint32
	perm  []uint32
	// delays[i] is hold i's lock-delay in milliseconds, like vals: holds
	// at or past len(delays) have none (see lockdelay.go).
	delays []uint32
	// maxHolds[i] is hold i's maximum hold time in milliseconds, like
	// delays (see maxhold.go).
	maxHolds []uint32
}

// n returns the number of holds; l may be nil.
func (l *lockRec) n() int {
	switch {
	case l == nil || !l.first.used:
		return 0
	case l.x == nil:
		return 1
	}
	return 1 + len(l.x.more)
}

// at returns the i-th hold.
func (l *lockRec) at(i int) *holder {
	if i == 0 {
		return &l.first
	}
	return &l.x.more[i-1]
}

// value returns the i-th hold's value ("" for none).
func (l *lockRec) value(i int) string {
	if l == nil || l.x == nil || i >= len(l.x.vals) {
		return ""
	}
	return l.x.vals[i]
}

// setValue sets the i-th hold's value.
func (l *lockRec) setValue(i int, v string) {
	if v == "" && (l.x == nil || i >= len(l.x.vals)) {
		return
	}
	if l.x == nil {
		l.x = &recExt{}
	}
	for len(l.x.vals) <= i {
		l.x.vals = append(l.x.vals, "")
	}
	l.x.vals[i] = v
	l.trim()
}

// trim drops trailing empty values and an empty recExt.
func (l *lockRec) trim() {
	if l.x == nil {
		return
	}
	v := l.x.vals
	for len(v) > 0 && v[len(v)-1] == "" {
		v = v[:len(v)-1]
	}
	if len(v) == 0 {
		v = nil
	}
	l.x.vals = v
	l.x.delays = trimDelays(l.x.delays)
	l.x.maxHolds = trimDelays(l.x.maxHolds)
	if len(l.x.more) == 0 && len(l.x.vals) == 0 && l.x.limit == 0 && len(l.x.perm) == 0 && len(l.x.delays) == 0 && len(l.x.maxHolds) == 0 {
		l.x = nil
	}
}

// kind returns the lock's kind (that of its holds).
func (l *lockRec) kind() wire.Kind { return l.first.kind }

// add appends a hold with value v.
func (l *lockRec) add(h holder, v string) {
	h.used = true
	i := l.n()
	if !l.first.used {
		l.first = h
	} else {
		if l.x == nil {
			l.x = &recExt{}
		}
		l.x.more = append(l.x.more, h)
	}
	l.setValue(i, v)
}

// remove deletes the i-th hold, keeping the others in order.
func (l *lockRec) remove(i int) {
	if l.x == nil {
		l.first = holder{}
		return
	}
	if i < len(l.x.vals) {
		l.x.vals = append(l.x.vals[:i], l.x.vals[i+1:]...)
	}
	if i < len(l.x.perm) {
		l.x.perm = append(l.x.perm[:i], l.x.perm[i+1:]...)
	}
	if i < len(l.x.delays) {
		l.x.delays = append(l.x.delays[:i], l.x.delays[i+1:]...)
	}
	if i < len(l.x.maxHolds) {
		l.x.maxHolds = append(l.x.maxHolds[:i], l.x.maxHolds[i+1:]...)
	}
	m := l.x.more
	if len(m) == 0 {
		l.first = holder{}
	} else {
		if i == 0 {
			l.first = m[0]
			i = 1
		}
		m = append(m[:i-1], m[i:]...)
		if len(m) == 0 {
			m = nil
		}
		l.x.more = m
	}
	l.trim()
}

// holds returns a copy of the holds in order.
func (l *lockRec) holds() []holder {
	out := make([]holder, 0, l.n())
	for i := range l.n() {
		out = append(out, *l.at(i))
	}
	return out
}

func (l *lockRec) find(o wire.Owner) int {
	for i := range l.n() {
		if l.at(i).owner == o {
			return i
		}
	}
	return -1
}

func (l *lockRec) findToken(t uint64) int {
	for i := range l.n() {
		if l.at(i).token == t {
			return i
		}
	}
	return -1
}

func exclusive(k wire.Kind) bool { return k != wire.KindRead }

// canGrant reports whether owner o may take the key in kind k now, and
// whether that is a reacquire of a hold it has.
func (l *lockRec) canGrant(o wire.Owner, k wire.Kind) (ok, again bool) {
	n := l.n()
	if n == 0 {
		return true, false
	}
	i := l.find(o)
	if k == wire.KindSemaphore || l.kind() == wire.KindSemaphore {
		return false, false // semaphores: see semCanGrant
	}
	if exclusive(k) {
		if i >= 0 && n == 1 && exclusive(l.kind()) {
			return true, true
		}
		return false, false
	}
	if exclusive(l.kind()) {
		return false, false
	}
	return true, i >= 0
}

// encodeRec encodes a lock record for a checkpoint. Version 1 has no
// values; version 2, written only when a hold has a value, follows each
// hold with its value. Both load.
func encodeRec(dst []byte, l *lockRec) []byte {
	if l.hasDelays() || l.hasMaxHolds() {
		return encodeDelayRec(dst, l)
	}
	if l.kind() == wire.KindSemaphore {
		return encodeSemRec(dst, l)
	}
	ver := byte(1)
	if l.x != nil && len(l.x.vals) > 0 {
		ver = 2
	}
	dst = append(dst, ver, byte(l.kind()))
	dst = binary.AppendUvarint(dst, uint64(l.n()))
	for i := range l.n() {
		h := l.at(i)
		dst = binary.AppendUvarint(dst, h.owner.Client)
		dst = binary.AppendUvarint(dst, h.owner.ID)
		dst = binary.AppendUvarint(dst, h.token)
		dst = binary.AppendUvarint(dst, uint64(h.ttlMs))
		if ver == 2 {
			dst = appendValue(dst, l.value(i))
		}
	}
	return dst
}

func decodeRec(b []byte) (*lockRec, error) {
	r := newReader(b)
	ver := r.Byte()
	if ver == semRecVersion {
		return decodeSemRec(&r)
	}
	if ver >= delayRecVersion && ver <= semMaxHoldRecVersion {
		return decodeDelayRec(&r, ver)
	}
	if ver != 1 && ver != 2 {
		return nil, fmt.Errorf("group: lock record version: %w", errBadCommand)
	}
	kind := wire.Kind(r.Byte())
	if kind == wire.KindSemaphore {
		return nil, fmt.Errorf("group: a semaphore in a lock record: %w", errBadCommand)
	}
	l := &lockRec{}
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		return nil, errBadCommand
	}
	for i := uint64(0); i < n && !r.Failed(); i++ {
		h := holder{kind: kind}
		h.owner.Client = r.Uvarint()
		h.owner.ID = r.Uvarint()
		h.token = r.Uvarint()
		h.ttlMs = uint32(r.Uvarint())
		var v string
		if ver == 2 {
			v = r.value()
		}
		l.add(h, v)
	}
	if r.Failed() {
		return nil, errBadCommand
	}
	return l, nil
}
