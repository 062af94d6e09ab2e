package group

import (
	"encoding/binary"
	"sync"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// Keys of the state machine's keyspace (its Paxos group's, in Pebble).
const (
	lockPrefix   = 'l' // 'l' + full key -> lock record
	metaPrefix   = 'm' // 'm' + name -> value
	delayPrefix  = 'd' // 'd' + full key -> lock-delay record (lockdelay.go)
	revokePrefix = 'k' // 'k' + full key -> revoked holds (revoke_state.go)
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
	// multi is an opMultiAcquire's per-key outcome.
	multi *multiOutcome
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
	// revoked holds the keys with holds an operator revoked, and
	// revokedDirty those changed since the last checkpoint, as delays and
	// delayDirty (see revoke_state.go).
	revoked      map[string][]revMark
	revokedDirty map[string]bool
	// nsKeys holds each namespace's held keys in order, nsFree the freed
	// nodes of their trees (nsindex.go).
	nsKeys map[string]*nsTree
	nsFree *nsFreeList
	// gen is the last stamp given to a record entering the table (see
	// stamp).
	gen uint32
}

// stamp gives record l, entering the table, a stamp no record of this
// shard has had for the last 2^32-1 stamps (lockRec.gen; never 0); s.mu
// is held for writing.
func (s *shard) stamp(l *lockRec) {
	s.gen++
	if s.gen == 0 {
		s.gen = 1
	}
	l.gen = s.gen
}

// StateMachine is one group's replicated state: its lock table, its move
// records and, in group 0, the system tables (package systable), over
// which Apply and Load are multiplexers (tables.go). It implements
// paxos.StateMachine; workers read the lock table under each shard's
// lock.
//
// The table lives in memory and the log is its durable record: Apply
// writes no lock record, it only notes the key as dirty, and the runtime
// asks for a checkpoint now and then (paxos.Checkpointer), which writes the
// records of the dirty keys that are held and deletes those that were
// stored and are free. A key taken and given back between two checkpoints
// — the common short-lived lock — costs no storage write at all, where
// writing through would put a record (or tombstone) into Pebble's memtable
// for every acquire and release, about half of its inserts. A restart
// loads the last checkpoint and the runtime replays the log above it.
//
// System-table and group-version changes (rare) are written through at
// once; replaying them over a keyspace that already holds them ends in the
// same state, since each is a plain overwrite.
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

	nsHeld map[string]nsUse // held keys and holders per namespace, guarded by mu (nslocks.go)
	// quota is the node's quota table, whose held counts this group's
	// apply moves, and gid the group's index in it (quotacheck.go).
	quota *quotaTable
	gid   ID

	// moves is the group's move records (move_apply.go), guarded by mu but
	// for the gates the workers read; the states an Apply applied are
	// told to moveObs once it ends (set before the group starts).
	moves   systable.Moves
	moveObs func([]systable.MoveNews)

	// Group 0's system tables, each behind its own lock (empty in the
	// other groups).
	ns      systable.Namespaces // namespaces and their verifiers (namespace.go)
	quotas  systable.Quotas     // the namespaces' quotas (quota.go)
	members systable.Members    // the cluster's member list (members.go)
	reg     systable.Registry   // the registry's tables, in a meta cluster (registry.go)
	audit   systable.Audit      // the audit log (audit.go)
	// regPropose serialises this node's registry proposals (node-local,
	// never replicated; see proposeRegistry).
	regPropose sync.Mutex
}

// NewStateMachine returns an empty lock table split over workers shards.
func NewStateMachine(workers int) *StateMachine {
	sm := &StateMachine{workers: workers, shards: make([]shard, workers)}
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

// view calls f with key's record (nil when the key is free) under its
// shard's read lock: how the workers read a record.
//
// Apply changes records in place, so f copies out what it needs (a
// holder by value, a value string: strings are never changed) and keeps
// neither the record nor a pointer or slice into it past its return. Nor
// may f take a lock of the state machine (a second read lock of the
// shard deadlocks against an apply waiting for it) or do what waits: no
// answer, no proposal, no quota — f decides, its caller acts.
//
// Reading in place costs the request nothing beyond what it reads: a
// copy per request (what workers did before) costs an allocation on the
// uncontended hot path and, for a key of Config.MaxHoldersPerKey holders,
// tens of KiB, every time. Records that apply replaced instead of
// changing them (copy-on-write) would let readers keep them, but cost a
// copy of the record per command on every replica, renewals included.
func (sm *StateMachine) view(key string, f func(l *lockRec)) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	f(s.locks[key])
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
	sm.applied = instance
	for i, b := range cmds {
		c, err := decodeCommand(b)
		if err != nil {
			results[i] = &outcome{status: wire.StatusError}
			continue
		}
		results[i] = sm.applyCommand(instance, &c, w)
	}
	news := sm.moves.TakeNews()
	obs := sm.moveObs
	sm.mu.Unlock()
	if len(news) > 0 && obs != nil {
		obs(news) // outside mu: the workers it wakes read the table
	}
}

func (sm *StateMachine) token(instance uint64) uint64 {
	return sm.version<<48 | instance&(1<<48-1)
}

// apply applies one decoded command of the lock table chosen at
// instance and returns its outcome.
func (sm *StateMachine) apply(instance uint64, c *command, w paxos.Writer) *outcome {
	if c.op != opSetVersion {
		// Nothing of a namespace that is moving or moved changes here.
		if st := sm.moveBlocks(c.key); st != 0 {
			return &outcome{status: st}
		}
	}
	if c.op == opMultiAcquire {
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
	was := l.n()
	held := was > 0
	out := sm.newOutcome()
	switch c.op {
	case opAcquire:
		if s.delayBlocks(c.key, l, c.owner) {
			out.status = wire.StatusLockOccupied
			break
		}
		out.status, out.token = sm.grant(&l, instance, grant{owner: c.owner, kind: c.kind, ttlMs: c.ttlMs, value: c.value, permits: c.permits, limit: c.limit, delayMs: c.delayMs, maxHoldMs: c.maxHoldMs})
	case opRenew, opRelease, opExpire, opDowngrade:
		if !held {
			out.status = wire.StatusLockDeleted
			break
		}
		sm.applyToHold(s, &l, instance, c, out)
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
	case opRevoke:
		out.status = s.revoke(c.key, l, c.owner, c.token)
	default:
		out.status = wire.StatusError
	}
	sm.put(c.key, s, l, was)
	if len(s.revoked) > 0 {
		s.pruneRevoked(c.key, l) // a removed hold's revocation ends with it
	}
	return out
}

// applyToHold applies a renew, release, expire or downgrade to the hold
// of held key c.key that c names, then (release, expire) grants to
// c.grants.
func (sm *StateMachine) applyToHold(s *shard, lp **lockRec, instance uint64, c *command, out *outcome) {
	l := *lp
	var i int
	if c.op == opExpire {
		// Readers granted in one command share a token, so the
		// master names the hold by owner and token; an Expire
		// without an owner names it by token alone.
		if c.owner.IsZero() {
			i = l.findToken(c.token)
		} else if i = l.find(c.owner); i >= 0 && l.at(i).token != c.token {
			i = -1
		}
		if i < 0 {
			out.status = wire.StatusTokenError
			return
		}
	} else {
		i = l.find(c.owner)
		if i < 0 {
			out.status = wire.StatusLockChangedOwner
			return
		}
		if l.at(i).token != c.token {
			out.status = wire.StatusTokenError
			return
		}
	}
	out.token = l.at(i).token
	if c.op == opDowngrade {
		sm.downgrade(l, i, c, out)
		return
	}
	if c.op == opRenew {
		if c.ttlMs > 0 {
			l.at(i).ttlMs = c.ttlMs
		}
		if c.setValue {
			l.setValue(i, c.value)
		}
		return
	}
	if c.keep != 0 {
		sm.keepPermits(s, lp, i, instance, c, out)
		return
	}
	delay := l.delayAt(i)
	l.remove(i)
	if c.op == opExpire && delay > 0 {
		// Freed involuntarily: no new grant for the hold's delay.
		sm.startDelay(s, c.key, delay, instance)
		out.delayMs = delay
	}
	sm.applyGrants(s, lp, instance, c, out)
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
		l.setMaxHold(i, g.maxHoldMs)
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
	l.setMaxHold(l.n()-1, g.maxHoldMs)
	return wire.StatusSuccess, tok
}

// put keeps key's record after a change (or drops it when empty), counts
// its keys and holders (it had was holds before), and notes the key for
// the next checkpoint.
func (sm *StateMachine) put(key string, s *shard, l *lockRec, was int) {
	wasHeld := was > 0
	var keys int64
	if l.n() == 0 {
		if !wasHeld {
			return // nothing changed: a refused or empty command
		}
		delete(s.locks, key)
		s.unindex(key)
		sm.count--
		keys = -1
	} else if !wasHeld {
		s.stamp(l)
		s.locks[key] = l
		s.index(key)
		sm.count++
		keys = 1
	}
	sm.countNS(key, keys, int64(l.n()-was))
	if _, ok := s.dirty[key]; !ok {
		s.dirty[key] = wasHeld
		sm.dirtyN++
	}
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
