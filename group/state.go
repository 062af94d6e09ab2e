// Package group is the lock service on top of paxos: it routes a key to
// its group and worker, decides on the master what can succeed, proposes
// it, applies acquire, renew, release and expire in a deterministic state
// machine, expires locks on the master's monotonic clock and hands freed
// locks to the waiter first in line: earliest arrival minus weight ×
// Config.WeightAging, so weights order the queue without starving anyone.
//
// # State machine
//
// Every replica keeps, per key, the holders of the lock (one writer, or
// readers) with each holder's owner, fencing token and TTL, in memory and
// in the group's Pebble keyspace. It stores TTLs, never deadlines: time
// enters the log only as an Expire the master decided (invariant I6; the
// invariants I1–I9 are in docs/design.md).
// A grant's token is groupVersion<<48 | instanceID; the master puts at most
// one owner-changing command per key into one instance (it serialises a
// key's changes), so a key's tokens strictly increase (I2), and a reader
// admitted together with others in one hand-off shares their token.
// A reacquire by the current owner keeps its token and refreshes its TTL,
// which also makes a retried acquire harmless.
package group

import (
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// holder is one owner's hold on a key.
type holder struct {
	owner wire.Owner
	token uint64
	ttlMs uint32
	kind  wire.Kind // the hold's kind; all holds of a key have the same
	used  bool      // set on every hold in a record (see lockRec.first)
	// age is how long before deadline the hold was granted (or this node
	// became master, whichever was later), as a heldCode: the master
	// reads the hold's age at release from it, for metrics. It sits in
	// what would be padding, so it costs no memory; master-only soft
	// state, like deadline.
	age heldCode
	// deadline is the master's deadline for the hold, in nanoseconds on
	// its worker's monotonic clock (see worker.mono), 0 when unknown. It
	// is master-only soft state kept here because the record exists
	// anyway: never encoded, replicated or compared.
	deadline int64
}

// heldCode is a duration in 16 bits: whole milliseconds up to 32.767 s
// exactly, longer ones (up to 69 years) as 10 significant bits of
// milliseconds and a 5-bit exponent, within 0.1 %. A hold's grant time
// needs a field of its own otherwise, and one more field would take
// lockRec from 48 to 64 bytes per held key.
type heldCode uint16

func encodeHeld(d time.Duration) heldCode {
	ms := (d + time.Millisecond/2) / time.Millisecond
	switch {
	case ms <= 0:
		return 0
	case ms < 1<<15:
		return heldCode(ms)
	}
	e := 0
	for ms>>e >= 1<<10 {
		e++
	}
	m := (ms + 1<<(e-1)) >> e // rounded to nearest
	if m == 1<<10 {
		m, e = 1<<9, e+1
	}
	if e > 31 {
		e, m = 31, 1<<10-1
	}
	return heldCode(1<<15 | e<<10 | int(m))
}

func (c heldCode) duration() time.Duration {
	if c&(1<<15) == 0 {
		return time.Duration(c) * time.Millisecond
	}
	return time.Duration(int64(c&(1<<10-1))<<((c>>10)&31)) * time.Millisecond
}

// lockRec is a key's lock: a writer (kind exclusive or write) or readers.
// The first hold is inline; the rest (more readers) and the holds' values
// are out of line in x, so the common held key without a value costs one
// 48-byte object besides its map entry. A record with no hold (first.used
// false) exists only inside apply.
type lockRec struct {
	first holder
	x     *recExt
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
	if len(l.x.more) == 0 && len(l.x.vals) == 0 && l.x.limit == 0 && len(l.x.perm) == 0 && len(l.x.delays) == 0 {
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

// clone returns a deep copy of l (nil for nil).
func (l *lockRec) clone() *lockRec {
	if l == nil {
		return nil
	}
	cp := &lockRec{first: l.first}
	if l.x != nil {
		cp.x = &recExt{more: append([]holder(nil), l.x.more...), vals: append([]string(nil), l.x.vals...),
			limit: l.x.limit, perm: append([]uint32(nil), l.x.perm...), delays: append([]uint32(nil), l.x.delays...)}
	}
	return cp
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
	if l.hasDelays() {
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
	r := reader{b: b}
	ver := r.byte()
	if ver == semRecVersion {
		return decodeSemRec(&r)
	}
	if ver == delayRecVersion || ver == semDelayRecVersion {
		return decodeDelayRec(&r, ver)
	}
	if ver != 1 && ver != 2 {
		return nil, fmt.Errorf("group: lock record version: %w", errBadCommand)
	}
	kind := wire.Kind(r.byte())
	if kind == wire.KindSemaphore {
		return nil, fmt.Errorf("group: a semaphore in a lock record: %w", errBadCommand)
	}
	l := &lockRec{}
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		return nil, errBadCommand
	}
	for i := uint64(0); i < n && !r.err; i++ {
		h := holder{kind: kind}
		h.owner.Client = r.uvarint()
		h.owner.ID = r.uvarint()
		h.token = r.uvarint()
		h.ttlMs = uint32(r.uvarint())
		var v string
		if ver == 2 {
			v = r.value()
		}
		l.add(h, v)
	}
	if r.err {
		return nil, errBadCommand
	}
	return l, nil
}

// Keys of a group's state-machine keyspace.
const (
	lockPrefix  = 'l' // 'l' + full key -> lock record
	metaPrefix  = 'm' // 'm' + name -> value
	delayPrefix = 'd' // 'd' + full key -> lock-delay record (lockdelay.go)
)

var versionKey = []byte("mversion")

// outcome is what applying one command returns to its proposer.
type outcome struct {
	status wire.Status
	// delayMs is the lock-delay an opExpire started on the key (the
	// removed hold's), 0 for none (see lockdelay.go). Next to status, in
	// what would be padding.
	delayMs uint32
	token   uint64
	// grants[i] is the token granted to command.grants[i], 0 if it could
	// not be granted.
	grants []uint64
	// key is the key as the lock table stores it when this command put a
	// new record there, so that the master's expiry entries can share its
	// bytes instead of keeping a copy of their own; "" otherwise.
	key string
	// multi is an opMultiAcquire's per-key outcome.
	multi *multiOutcome
}

// stored returns the lock table's copy of key if the command created the
// record, else key.
func (o *outcome) stored(key string) string {
	if o.key != "" {
		return o.key
	}
	return key
}

// shard is the part of the lock table one worker decides on.
type shard struct {
	mu    sync.RWMutex
	locks map[string]*lockRec
	// dirty holds the keys changed since the last checkpoint, each with
	// whether the keyspace holds a record for it (it did exactly when
	// the key was held at the checkpoint: the keyspace equals the table
	// at every checkpoint).
	dirty map[string]bool
	// delays holds the keys in a lock-delay, and delayDirty those whose
	// delay changed since the last checkpoint, each with whether the
	// keyspace holds a delay record for it, as dirty does for locks (see
	// lockdelay.go). Both are nil until the shard has had a delay.
	delays     map[string]delayRec
	delayDirty map[string]bool
}

// StateMachine is one group's replicated lock table. It implements
// paxos.StateMachine; workers read it under each shard's lock.
//
// The table lives in memory and the log is its durable record: Apply
// writes no lock record, it only notes the key as dirty, and the runtime
// asks for a checkpoint now and then (paxos.Checkpointer), which writes the
// records of the dirty keys that are held and deletes those that were
// stored and are free. A key taken and given back between two checkpoints
// — the common short-lived lock — costs no storage write at all; before,
// every acquire and release put a record (or tombstone) into Pebble's
// memtable, about half of its inserts. A restart loads the last checkpoint
// and the runtime replays the log above it.
//
// Namespace and group-version changes (rare) are still written through
// at once; replaying them over a keyspace that already holds them ends in
// the same state, since each is a plain overwrite.
type StateMachine struct {
	workers int
	shards  []shard
	version uint64 // group version; tokens are version<<48 | instance
	count   int64  // held keys, for status
	dirtyN  int    // dirty keys over all shards, guarded by mu

	mu      sync.Mutex // guards version, count and the observer
	applied uint64
	obs     func(paxos.SoftState)
	key     []byte // scratch
	val     []byte // scratch
	// outcomes is the rest of the chunk newOutcome carves from, guarded
	// by mu.
	outcomes []outcome

	nsMu       sync.RWMutex     // guards the namespace table
	namespaces map[string]nsRec // name -> the SCRAM verifier record (group 0)
	nsInit     bool             // the configured namespaces were installed
	nsGen      uint64           // counts changes of the table; see NamespaceGeneration
	nsHeld     map[string]int64 // held keys per namespace, guarded by mu (nslocks.go)

	memMu   sync.RWMutex      // guards the member list
	members map[uint32]Member // node id -> record (group 0)
	memInit bool              // the configured nodes were installed
	memGen  uint64            // counts changes of the list
	memObs  func()            // told of every change of the list (set before the group starts)
}

// NewStateMachine returns an empty lock table split over workers shards.
func NewStateMachine(workers int) *StateMachine {
	sm := &StateMachine{workers: workers, shards: make([]shard, workers), namespaces: make(map[string]nsRec), members: make(map[uint32]Member)}
	for i := range sm.shards {
		sm.shards[i].locks = make(map[string]*lockRec)
		sm.shards[i].dirty = make(map[string]bool)
	}
	return sm
}

func (sm *StateMachine) shardOf(key string) *shard {
	return &sm.shards[wire.WorkerOf(hashFull(key), sm.workers)]
}

// hashFull hashes a full key (namespace, 0x00, key) exactly as
// wire.KeyHash hashes its two parts.
func hashFull(full string) uint64 {
	ns, key := splitFull(full)
	return wire.KeyHash(ns, key)
}

// fullKey joins a namespace and a key; a namespace never contains 0x00.
func fullKey(ns, key string) string { return ns + "\x00" + key }

func splitFull(full string) (ns, key string) {
	for i := 0; i < len(full); i++ {
		if full[i] == 0 {
			return full[:i], full[i+1:]
		}
	}
	return "", full
}

// Version returns the group version.
func (sm *StateMachine) Version() uint64 {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.version
}

// Count returns the number of keys held.
func (sm *StateMachine) Count() int64 {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.count
}

// Applied returns the last applied instance.
func (sm *StateMachine) Applied() uint64 {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.applied
}

// get returns a copy of key's record, or nil.
func (sm *StateMachine) get(key string) *lockRec {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.locks[key].clone()
}

// outcomeChunk is how many outcomes newOutcome allocates at once.
const outcomeChunk = 64

// newOutcome returns a zeroed outcome with status success, carved from a
// chunk: a lock command's apply on every node would otherwise allocate one
// of its own, and most are dropped at once (a follower's) or after the
// master's answer. A chunk lives until all of its outcomes are dropped.
// It is called with sm.mu held.
func (sm *StateMachine) newOutcome() *outcome {
	if len(sm.outcomes) == 0 {
		sm.outcomes = make([]outcome, outcomeChunk)
	}
	o := &sm.outcomes[0]
	sm.outcomes = sm.outcomes[1:]
	o.status = wire.StatusSuccess
	return o
}

// Apply implements paxos.StateMachine. Lock records reach w only at the
// next Checkpoint; namespace and version changes are written at once.
func (sm *StateMachine) Apply(instance uint64, cmds [][]byte, w paxos.Writer, results []any) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sm.applied = instance
	for i, b := range cmds {
		c, err := decodeCommand(b)
		if err != nil {
			results[i] = &outcome{status: wire.StatusError}
			continue
		}
		results[i] = sm.apply(instance, &c, w)
	}
}

func (sm *StateMachine) token(instance uint64) uint64 {
	return sm.version<<48 | instance&(1<<48-1)
}

func (sm *StateMachine) apply(instance uint64, c *command, w paxos.Writer) *outcome {
	switch c.op {
	case opNamespacePut, opNamespaceDelete, opNamespaceInit:
		return sm.applyNamespace(c, w)
	case opMemberPut, opMemberInit:
		return sm.applyMember(c, w)
	case opMultiAcquire:
		return sm.applyMulti(instance, c)
	}
	if c.op == opSetVersion {
		if c.token > MaxGroupVersion {
			// A token has 16 bits for the version (RaiseVersion refuses
			// more before proposing): never shift one out.
			return &outcome{status: wire.StatusBadRequest, token: sm.version}
		}
		if c.token > sm.version {
			sm.version = c.token
			w.Set(versionKey, binary.AppendUvarint(nil, sm.version))
		}
		return &outcome{status: wire.StatusSuccess, token: sm.version}
	}
	s := sm.shardOf(c.key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[c.key]
	held := l.n() > 0
	out := sm.newOutcome()
	switch c.op {
	case opAcquire:
		if s.delayBlocks(c.key, l, c.owner) {
			out.status = wire.StatusLockOccupied
			break
		}
		out.status, out.token = sm.grant(&l, instance, grant{owner: c.owner, kind: c.kind, ttlMs: c.ttlMs, value: c.value, permits: c.permits, limit: c.limit, delayMs: c.delayMs})
	case opRenew, opRelease, opExpire, opDowngrade:
		if !held {
			out.status = wire.StatusLockDeleted
			break
		}
		var i int
		if c.op == opExpire {
			// Readers granted in one hand-off share a token, so the
			// master names the hold by owner and token; an Expire
			// without an owner names it by token alone.
			if c.owner.IsZero() {
				i = l.findToken(c.token)
			} else if i = l.find(c.owner); i >= 0 && l.at(i).token != c.token {
				i = -1
			}
			if i < 0 {
				out.status = wire.StatusTokenError
				break
			}
		} else {
			i = l.find(c.owner)
			if i < 0 {
				out.status = wire.StatusLockChangedOwner
				break
			}
			if l.at(i).token != c.token {
				out.status = wire.StatusTokenError
				break
			}
		}
		out.token = l.at(i).token
		if c.op == opDowngrade {
			sm.downgrade(l, i, c, out)
			break
		}
		if c.op == opRenew {
			if c.ttlMs > 0 {
				l.at(i).ttlMs = c.ttlMs
			}
			if c.setValue {
				l.setValue(i, c.value)
			}
			break
		}
		delay := l.delayAt(i)
		l.remove(i)
		if c.op == opExpire && delay > 0 {
			// Freed involuntarily: no new grant for the hold's delay.
			sm.startDelay(s, c.key, delay, instance)
			out.delayMs = delay
		}
		sm.applyGrants(s, &l, instance, c, out)
	case opGrant:
		sm.applyGrants(s, &l, instance, c, out)
	case opUndelay:
		out.status = sm.endDelay(s, c.key, c.token)
		sm.applyGrants(s, &l, instance, c, out)
	case opSetPermits:
		if held && l.kind() == wire.KindSemaphore && c.limit > 0 {
			l.x.limit = c.limit
		}
		sm.applyGrants(s, &l, instance, c, out)
	default:
		out.status = wire.StatusError
	}
	sm.put(c.key, s, l, held)
	if !held && l.n() > 0 {
		out.key = c.key
	}
	return out
}

// downgrade applies opDowngrade to hold i of l (owner and token checked).
func (sm *StateMachine) downgrade(l *lockRec, i int, c *command, out *outcome) {
	h := l.at(i)
	switch h.kind {
	case wire.KindWrite:
		// The only hold of the key (a writer is alone): the record
		// becomes read-held.
		h.kind = wire.KindRead
	case wire.KindRead:
		// Done already (a retried downgrade).
	default:
		out.status = wire.StatusBadRequest
		return
	}
	if c.ttlMs > 0 {
		h.ttlMs = c.ttlMs
	}
}

func (sm *StateMachine) applyGrants(s *shard, lp **lockRec, instance uint64, c *command, out *outcome) {
	if len(c.grants) == 0 {
		return
	}
	out.grants = make([]uint64, len(c.grants))
	for j, g := range c.grants {
		if s.delayBlocks(c.key, *lp, g.owner) {
			continue // the key is in a lock-delay: not granted
		}
		if st, tok := sm.grant(lp, instance, g); st == wire.StatusSuccess {
			out.grants[j] = tok
		}
	}
}

// grant gives the key to o with holder value v if the state allows; a
// reacquire replaces the hold's value with v.
func (sm *StateMachine) grant(lp **lockRec, instance uint64, g grant) (wire.Status, uint64) {
	if g.kind == wire.KindSemaphore {
		return sm.semGrant(lp, instance, g)
	}
	o, k, ttlMs, v := g.owner, g.kind, g.ttlMs, g.value
	l := *lp
	ok, again := l.canGrant(o, k)
	if !ok {
		return wire.StatusLockOccupied, 0
	}
	if again {
		i := l.find(o)
		h := l.at(i)
		h.ttlMs = ttlMs
		l.setValue(i, v)
		l.setDelay(i, g.delayMs)
		return wire.StatusSuccess, h.token
	}
	if l == nil {
		l = &lockRec{}
		*lp = l
	}
	if l.n() == 0 && l.x != nil {
		l.x.limit, l.x.perm = 0, nil // a semaphore's, emptied by this command
	}
	tok := sm.token(instance)
	l.add(holder{owner: o, token: tok, ttlMs: ttlMs, kind: k}, v)
	l.setDelay(l.n()-1, g.delayMs)
	return wire.StatusSuccess, tok
}

// put keeps key's record after a change (or drops it when empty) and
// notes the key for the next checkpoint.
func (sm *StateMachine) put(key string, s *shard, l *lockRec, wasHeld bool) {
	if l.n() == 0 {
		if !wasHeld {
			return // nothing changed: a refused or empty command
		}
		delete(s.locks, key)
		sm.count--
		sm.countNS(key, -1)
	} else if !wasHeld {
		s.locks[key] = l
		sm.count++
		sm.countNS(key, 1)
	}
	if _, ok := s.dirty[key]; !ok {
		s.dirty[key] = wasHeld
		sm.dirtyN++
	}
}

// checkpointKeys is how many dirty keys make a checkpoint due before the
// runtime's own interval: it bounds the dirty maps' memory and the
// records a restart finds only in the log.
const checkpointKeys = 8192

// CheckpointDue implements paxos.Checkpointer.
func (sm *StateMachine) CheckpointDue() bool {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.dirtyN >= checkpointKeys
}

// Checkpoint implements paxos.Checkpointer: it writes the record of every
// key changed since the last checkpoint that is held now, and deletes the
// stored record of every such key that is free now.
func (sm *StateMachine) Checkpoint(w paxos.Writer) {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for i := range sm.shards {
		s := &sm.shards[i]
		s.mu.Lock()
		for key, stored := range s.dirty {
			sm.key = append(append(sm.key[:0], lockPrefix), key...)
			if l := s.locks[key]; l.n() > 0 {
				sm.val = encodeRec(sm.val[:0], l)
				w.Set(sm.key, sm.val)
			} else if stored {
				w.Delete(sm.key)
			}
		}
		if len(s.dirty) > checkpointKeys/len(sm.shards) {
			s.dirty = make(map[string]bool) // let a burst's buckets go
		} else {
			clear(s.dirty)
		}
		sm.checkpointDelays(s, w)
		s.mu.Unlock()
	}
	sm.dirtyN = 0
}

// Load implements paxos.StateMachine.
func (sm *StateMachine) Load(r paxos.Reader, applied uint64) error {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for i := range sm.shards {
		sm.shards[i].mu.Lock()
		sm.shards[i].locks = make(map[string]*lockRec)
		sm.shards[i].dirty = make(map[string]bool)
		sm.shards[i].delays, sm.shards[i].delayDirty = nil, nil
	}
	sm.dirtyN = 0
	defer func() {
		for i := range sm.shards {
			sm.shards[i].mu.Unlock()
		}
	}()
	sm.version, sm.count, sm.applied = 0, 0, applied
	sm.nsHeld = nil
	sm.nsMu.Lock()
	defer sm.nsMu.Unlock()
	sm.namespaces = make(map[string]nsRec)
	sm.nsInit = false
	sm.nsGen++
	sm.memMu.Lock()
	sm.members = make(map[uint32]Member)
	sm.memInit = false
	sm.memGen++
	defer func() {
		obs := sm.memObs
		sm.memMu.Unlock()
		if obs != nil {
			obs()
		}
	}()
	// Records are gathered per shard first and each shard's map made at
	// its final size: growing the maps one insert at a time cost about a
	// quarter of a restart's Load in table splits.
	type loaded struct {
		key string
		l   *lockRec
	}
	recs := make([][]loaded, len(sm.shards))
	err := r.Scan(nil, func(k, v []byte) error {
		switch {
		case len(k) > 0 && k[0] == nsPrefix:
			return sm.loadNamespace(k, v)
		case string(k) == string(nsInitKey):
			sm.nsInit = true
		case len(k) > 0 && k[0] == memberPrefix:
			return sm.loadMember(k, v)
		case string(k) == string(memberInitKey):
			sm.memInit = true
		case len(k) > 0 && k[0] == delayPrefix:
			return sm.loadDelay(k, v)
		case len(k) > 0 && k[0] == lockPrefix:
			l, err := decodeRec(v)
			if err != nil {
				return fmt.Errorf("group: lock %q: %w", k[1:], err)
			}
			key := string(k[1:])
			i := wire.WorkerOf(hashFull(key), sm.workers)
			recs[i] = append(recs[i], loaded{key, l})
			sm.count++
			sm.countNS(key, 1)
		case string(k) == string(versionKey):
			v, n := binary.Uvarint(v)
			if n <= 0 {
				return fmt.Errorf("group: version: %w", errBadCommand)
			}
			sm.version = v
		}
		return nil
	})
	for i, rs := range recs {
		m := make(map[string]*lockRec, len(rs))
		for _, x := range rs {
			m[x.key] = x.l
		}
		sm.shards[i].locks = m
		recs[i] = nil
	}
	return err
}

// MasterChanged implements paxos.MasterObserver.
func (sm *StateMachine) MasterChanged(s paxos.SoftState) {
	sm.mu.Lock()
	f := sm.obs
	sm.mu.Unlock()
	if f != nil {
		f(s)
	}
}

func (sm *StateMachine) observe(f func(paxos.SoftState)) {
	sm.mu.Lock()
	sm.obs = f
	sm.mu.Unlock()
}

// setDeadline records the master's deadline of owner o's hold with token
// on key, and reports whether that hold exists and the deadline it had.
func (sm *StateMachine) setDeadline(key string, o wire.Owner, token uint64, at int64) (prev int64, ok bool) {
	s := sm.shardOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token {
		h := l.at(i)
		prev, h.deadline = h.deadline, at
		if prev == 0 { // granted now, with a deadline of its TTL
			h.age = encodeHeld(time.Duration(h.ttlMs) * time.Millisecond)
		} else { // renewed (or its expiry retried): granted as long before
			h.age = encodeHeld(h.age.duration() + time.Duration(at-prev))
		}
		return prev, true
	}
	return 0, false
}

// grantedAt returns when, on the worker's monotonic clock, owner o's hold
// with token on key was granted (or this node became master, whichever
// was later), and whether that is known.
func (sm *StateMachine) grantedAt(key string, o wire.Owner, token uint64) (int64, bool) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token && l.at(i).deadline != 0 {
		return l.at(i).deadline - int64(l.at(i).age.duration()), true
	}
	return 0, false
}

// liveDeadlines keeps the entries of es (all of shard i) whose hold still
// has that deadline, in place, and returns them.
func (sm *StateMachine) liveDeadlines(i int, es []expiry) []expiry {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := es[:0]
	for _, e := range es {
		l := s.locks[e.key]
		if j := l.find(e.owner); j >= 0 && l.at(j).token == e.token && l.at(j).deadline == e.at {
			out = append(out, e)
		}
	}
	clear(es[len(out):])
	return out
}

// deadline returns the master's deadline of owner o's hold with token on
// key (0 when unknown), and whether that hold exists.
func (sm *StateMachine) deadline(key string, o wire.Owner, token uint64) (int64, bool) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	l := s.locks[key]
	if i := l.find(o); i >= 0 && l.at(i).token == token {
		return l.at(i).deadline, true
	}
	return 0, false
}

// forEachMut calls f for every record of shard i under its write lock; f
// may change the holds' master-only deadlines, nothing else.
func (sm *StateMachine) forEachMut(i int, f func(key string, l *lockRec)) {
	s := &sm.shards[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, l := range s.locks {
		f(k, l)
	}
}

// forEach calls f for every record of shard i under its read lock.
func (sm *StateMachine) forEach(i int, f func(key string, l *lockRec)) {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, l := range s.locks {
		f(k, l)
	}
}
