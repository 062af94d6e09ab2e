package group

// Lock-delay (Chubby's lock-delay, Consul's LockDelay). A hold may carry a
// delay (Request.LockDelayMs, at most wire.MaxLockDelayMs): when it ends
// involuntarily — its TTL ran out, or an operator force-unlocked it, both
// an opExpire — the key is granted to nobody new for that long, so that a
// holder that lost the lock without knowing (a paused process, a
// partition) has time to stop before the next one starts, for resources
// that cannot check a fencing token. A release by the holder ends nothing
// of the kind: the key is free at once.
//
// The delay is replicated state. The hold's delay is in its record
// (recExt.delays; lock records of version 4, semaphore records of version
// 5, written only when a hold has a delay), and the opExpire that removes
// such a hold puts a delay record on the key (shard.delays: the delay in
// milliseconds and an id, the token of the instance that set it;
// checkpointed under delayPrefix like a lock record). While a key has a
// delay record the state machine grants it to nobody who does not hold
// it already (an acquire is LOCK_OCCUPIED, a command's grants are not
// made), whatever a master proposes; the holds the key still has (other
// readers, a semaphore's other holders) keep renewing and releasing.
//
// Only a master ends a delay, with opUndelay naming the record's id, once
// the delay has passed on its own monotonic clock: deadlines are
// master-only soft state (invariant I6), never replicated. The master
// that applied the expire dates the delay from that moment
// (worker.delays, with a timer: no polling); a new master cannot know
// when the old one started it, so it gives every delay record it finds a
// full delay from the moment it becomes master, as becomeMaster gives a
// held lock a full TTL. A delay therefore lasts at least its length, and
// at most that plus the time to elect a master (one more delay when the
// mastership moves during it). When the delay ends its opUndelay grants
// the key to the waiters queued meanwhile, in queue order, in the same
// command. A second expire while the key is delayed (another reader's
// hold) keeps the longer of the two.

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// Lock record versions with lock-delays: each hold is followed by its
// value and its delay (a lock), or by its permits, value and delay (a
// semaphore, after the total).
const (
	delayRecVersion    = 4
	semDelayRecVersion = 5
)

// delayRecordVersion is the version byte of a key's delay record.
const delayRecordVersion = 1

// delayRetry is how soon a master tries again to end a delay whose
// opUndelay was not chosen (overload, a lost lease).
const delayRetry = 10 * time.Millisecond

// delayRec is a key's lock-delay in the state machine: the delay's length
// and its id, the token of the instance that set it (an opUndelay names
// it, so that it never ends a later delay).
type delayRec struct {
	ms uint32
	id uint64
}

// delayAt returns hold i's lock-delay in milliseconds (0 for none).
func (l *lockRec) delayAt(i int) uint32 {
	if l == nil || l.x == nil || i >= len(l.x.delays) {
		return 0
	}
	return l.x.delays[i]
}

// setDelay sets hold i's lock-delay.
func (l *lockRec) setDelay(i int, ms uint32) {
	if ms == 0 && (l.x == nil || i >= len(l.x.delays)) {
		return
	}
	if l.x == nil {
		l.x = &recExt{}
	}
	for len(l.x.delays) <= i {
		l.x.delays = append(l.x.delays, 0)
	}
	l.x.delays[i] = ms
	l.trim()
}

// hasDelays reports whether a hold of l has a lock-delay.
func (l *lockRec) hasDelays() bool { return l != nil && l.x != nil && len(l.x.delays) > 0 }

// trimDelays drops trailing zero delays (nil for none left).
func trimDelays(d []uint32) []uint32 {
	for len(d) > 0 && d[len(d)-1] == 0 {
		d = d[:len(d)-1]
	}
	if len(d) == 0 {
		return nil
	}
	return d
}

// encodeDelayRec encodes a record some of whose holds have a lock-delay:
// version 4 for a lock (version 2's layout with each hold's delay after
// its value), 5 for a semaphore (version 3's, likewise). When a hold has
// a maximum hold time, version 6 or 7: 4's or 5's layout with each hold's
// bound after its delay (see maxhold.go).
func encodeDelayRec(dst []byte, l *lockRec) []byte {
	sem := l.kind() == wire.KindSemaphore
	mh := l.hasMaxHolds()
	ver := byte(delayRecVersion)
	switch {
	case sem && mh:
		ver = semMaxHoldRecVersion
	case mh:
		ver = maxHoldRecVersion
	case sem:
		ver = semDelayRecVersion
	}
	dst = append(dst, ver, byte(l.kind()))
	if sem {
		dst = binary.AppendUvarint(dst, uint64(l.limit()))
	}
	dst = binary.AppendUvarint(dst, uint64(l.n()))
	for i := range l.n() {
		h := l.at(i)
		dst = binary.AppendUvarint(dst, h.owner.Client)
		dst = binary.AppendUvarint(dst, h.owner.ID)
		dst = binary.AppendUvarint(dst, h.token)
		dst = binary.AppendUvarint(dst, uint64(h.ttlMs))
		if sem {
			dst = binary.AppendUvarint(dst, uint64(l.permitsAt(i)))
		}
		dst = appendValue(dst, l.value(i))
		dst = binary.AppendUvarint(dst, uint64(l.delayAt(i)))
		if mh {
			dst = binary.AppendUvarint(dst, uint64(l.maxHoldAt(i)))
		}
	}
	return dst
}

// decodeDelayRec decodes a record of version 4 to 7 after its version
// byte.
func decodeDelayRec(r *reader, ver byte) (*lockRec, error) {
	kind := wire.Kind(r.Byte())
	sem := ver == semDelayRecVersion || ver == semMaxHoldRecVersion
	mh := ver == maxHoldRecVersion || ver == semMaxHoldRecVersion
	if !kind.Valid() || sem != (kind == wire.KindSemaphore) {
		return nil, fmt.Errorf("group: lock record version %d of kind %d: %w", ver, kind, errBadCommand)
	}
	var limit uint32
	if sem {
		limit = r.u32()
	}
	n := r.Uvarint()
	if n == 0 || n > uint64(r.Len()) {
		return nil, errBadCommand
	}
	l := &lockRec{}
	for i := uint64(0); i < n && !r.Failed(); i++ {
		h := holder{kind: kind}
		h.owner.Client = r.Uvarint()
		h.owner.ID = r.Uvarint()
		h.token = r.Uvarint()
		h.ttlMs = r.u32()
		var p uint32
		if sem {
			if p = r.u32(); p == 0 {
				r.Fail()
			}
		}
		v := r.value()
		d := r.u32()
		var m uint32
		if mh {
			m = r.maxHold()
		}
		if sem {
			l.addSem(h, v, p, limit)
		} else {
			l.add(h, v)
		}
		l.setDelay(l.n()-1, d)
		l.setMaxHold(l.n()-1, m)
	}
	if !r.Done() {
		return nil, errBadCommand
	}
	return l, nil
}

// hasDelay reports whether c carries a lock-delay.
func (c *command) hasDelay() bool { return hasGrantField(c.delayMs, c.grants, grantDelay) }

// appendDelay writes a command's lock-delays (see appendCommand).
func appendDelay(dst []byte, c *command) []byte {
	return appendGrantField(dst, c.delayMs, c.grants, grantDelay)
}

func grantDelay(g *grant) uint32 { return g.delayMs }

// decodeDelay reads what appendDelay wrote.
func decodeDelay(r *reader, c *command) {
	c.delayMs = r.u32()
	r.perGrant(c, func(g *grant) { g.delayMs = r.u32() })
}

// delayBlocks reports whether key, whose record is l, is in a lock-delay
// that keeps it from owner o: o holds none of it. Called with s.mu held.
func (s *shard) delayBlocks(key string, l *lockRec, o wire.Owner) bool {
	if len(s.delays) == 0 {
		return false
	}
	_, delayed := s.delays[key]
	return delayed && l.find(o) < 0
}

// noteDelay records that key's delay record changes, for the next
// checkpoint. Called with s.mu held, before the change.
func (s *shard) noteDelay(key string) {
	if s.delayDirty == nil {
		s.delayDirty = make(map[string]bool)
	}
	if _, ok := s.delayDirty[key]; !ok {
		_, stored := s.delays[key]
		s.delayDirty[key] = stored
	}
}

// startDelay puts a lock-delay of ms on key, applied at instance: the
// longer of it and one the key has, under a new id. Called with s.mu
// held.
func (sm *StateMachine) startDelay(s *shard, key string, ms uint32, instance uint64) {
	s.noteDelay(key)
	if s.delays == nil {
		s.delays = make(map[string]delayRec)
	}
	if d, ok := s.delays[key]; ok {
		ms = max(ms, d.ms)
	}
	s.delays[key] = delayRec{ms: ms, id: sm.token(instance)}
}

// endDelay applies opUndelay's end of key's delay with id: SUCCESS when
// it ended it or the key has none, TOKEN_ERROR (nothing changed) when the
// key's delay is another. Called with s.mu held.
func (sm *StateMachine) endDelay(s *shard, key string, id uint64) wire.Status {
	d, ok := s.delays[key]
	switch {
	case !ok:
		return wire.StatusSuccess
	case d.id != id:
		return wire.StatusTokenError
	}
	s.noteDelay(key)
	delete(s.delays, key)
	return wire.StatusSuccess
}

// checkpointDelays writes the delay records changed since the last
// checkpoint into w, and deletes the stored ones that ended. Called with
// s.mu held.
func (sm *StateMachine) checkpointDelays(s *shard, w paxos.Writer) {
	if len(s.delayDirty) == 0 {
		return
	}
	for key, stored := range s.delayDirty {
		sm.key = append(append(sm.key[:0], delayPrefix), key...)
		if d, ok := s.delays[key]; ok {
			sm.val = encodeDelay(sm.val[:0], d)
			w.Set(sm.key, sm.val)
		} else if stored {
			w.Delete(sm.key)
		}
	}
	s.delayDirty = nil
	if len(s.delays) == 0 {
		s.delays = nil
	}
}

// encodeDelay encodes a delay record: version, delay (ms), id.
func encodeDelay(dst []byte, d delayRec) []byte {
	dst = append(dst, delayRecordVersion)
	dst = binary.AppendUvarint(dst, uint64(d.ms))
	return binary.AppendUvarint(dst, d.id)
}

// decodeDelayRecord decodes a delay record.
func decodeDelayRecord(b []byte) (delayRec, error) {
	r := newReader(b)
	if r.Byte() != delayRecordVersion {
		return delayRec{}, fmt.Errorf("group: lock-delay record version: %w", errBadCommand)
	}
	d := delayRec{ms: r.u32(), id: r.Uvarint()}
	if !r.Done() {
		return delayRec{}, errBadCommand
	}
	return d, nil
}

// loadDelay loads the delay record of key k[1:] (Load, shards locked).
func (sm *StateMachine) loadDelay(k, v []byte) error {
	d, err := decodeDelayRecord(v)
	if err != nil {
		return fmt.Errorf("group: lock-delay of %q: %w", k[1:], err)
	}
	key := string(k[1:])
	s := sm.shardOf(key)
	if s.delays == nil {
		s.delays = make(map[string]delayRec)
	}
	s.delays[key] = d
	return nil
}

// delayOf returns key's delay record, if it has one.
func (sm *StateMachine) delayOf(key string) (delayRec, bool) {
	s := sm.shardOf(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.delays[key]
	return d, ok
}

// forEachDelay calls f for every delay record of shard i under its read
// lock.
func (sm *StateMachine) forEachDelay(i int, f func(key string, d delayRec)) {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, d := range s.delays {
		f(k, d)
	}
}

// On the master.

// lockDelayOf returns the lock-delay r asks for, in milliseconds, at most
// wire.MaxLockDelayMs.
func lockDelayOf(r *Request) uint32 {
	return min(uint32(r.LockDelayMs), wire.MaxLockDelayMs)
}

// delayState is what a master knows of a key's lock-delay.
type delayState uint8

const (
	delayNone    delayState = iota // no delay: grant as usual
	delayRunning                   // not over on this master's clock
	delayEnding                    // over: an opUndelay is in flight now
)

// delayCheck says whether key is in a lock-delay on this master, and the
// time it has left. A delay that is over but still recorded is ended
// here: its opUndelay is proposed (the key is then busy) and the answer is
// delayEnding, so that the caller waits for it.
func (w *worker) delayCheck(key string, ks *keyState) (delayState, time.Duration) {
	if len(w.delays) == 0 {
		return delayNone, 0
	}
	end, ok := w.delays[key]
	if !ok {
		return delayNone, 0
	}
	if left := time.Duration(end - w.mono(w.clock.Now())); left > 0 {
		return delayRunning, left
	}
	if w.endDelay(key, ks) {
		return delayEnding, 0
	}
	return delayNone, 0
}

// delayHolds reports whether key's waiters must not be granted now: it is
// in a lock-delay, or its delay just ended and its opUndelay (which grants
// them) is in flight.
func (w *worker) delayHolds(key string, ks *keyState) bool {
	st, _ := w.delayCheck(key, ks)
	return st != delayNone
}

// endDelay proposes the end of key's lock-delay with the grants to its
// waiters that it allows, and reports whether it did; a key without a
// delay record only loses its deadline.
func (w *worker) endDelay(key string, ks *keyState) bool {
	d, ok := w.g.sm.delayOf(key)
	if !ok {
		delete(w.delays, key)
		return false
	}
	var ws []*waiter
	if len(ks.waiters) > 0 {
		w.g.sm.view(key, func(rec *lockRec) { ws = w.pick(ks, rec, wire.Owner{}, 0) })
	}
	w.propose(ks, &pending{grants: ws, cmd: command{op: opUndelay, key: key, token: d.id, grants: w.grantsFor(ks, ws)}})
	return true
}

// startDelay dates key's lock-delay of ms from now on this master's
// clock (keeping a later end it has) and sets a timer for its end.
func (w *worker) startDelay(key string, ms uint32, now time.Time) {
	end := w.mono(now.Add(time.Duration(ms) * time.Millisecond))
	if cur, ok := w.delays[key]; ok && cur >= end {
		return
	}
	w.setDelayEnd(key, end)
}

// setDelayEnd sets key's delay to end at end (worker.mono), and a timer.
func (w *worker) setDelayEnd(key string, end int64) {
	if w.delays == nil {
		w.delays = make(map[string]int64)
	}
	w.delays[key] = end
	w.schedule(timerEntry{at: w.timeOf(end), kind: tDelay, key: key})
}

// delayDue handles a delay timer of key: if its delay is over, it is ended
// now; while a change of the key is in flight, resume ends it when that is
// done, and this timer comes again shortly in case it does not get to.
func (w *worker) delayDue(key string, now time.Time) {
	end, ok := w.delays[key]
	if !ok || end > w.mono(now) {
		return // ended already, or moved later (its own timer is set)
	}
	if _, moving := w.g.sm.gateKey(key); moving {
		delete(w.delays, key) // frozen: dated again if it is served again
		return
	}
	ks := w.state(key)
	if ks.busy {
		w.schedule(timerEntry{at: now.Add(delayRetry), kind: tDelay, key: key})
	} else {
		w.endDelay(key, ks)
	}
	w.tidy(key, ks)
}

// resumeDelays dates every lock-delay of the worker's keys in full from
// now: the new master cannot know when its predecessor started them.
func (w *worker) resumeDelays() {
	w.delays = nil
	now := w.clock.Now()
	w.g.sm.forEachDelay(w.idx, func(key string, d delayRec) { w.startDelay(key, d.ms, now) })
}

// delayResult follows a proposal's outcome for lock-delays: an expire that
// started one dates it from now; an opUndelay that ended one forgets its
// deadline, and one that was not chosen is proposed again shortly.
func (w *worker) delayResult(key string, p *pending, out *outcome, err error, now time.Time) {
	switch {
	case err != nil || out == nil:
		if p.cmd.op == opUndelay {
			w.setDelayEnd(key, w.mono(now.Add(delayRetry)))
		}
	case out.delayMs > 0:
		w.startDelay(key, out.delayMs, now)
	case p.cmd.op == opUndelay && out.status == wire.StatusSuccess:
		delete(w.delays, key)
	case p.cmd.op == opUndelay:
		// Another delay than the one named: a key's changes are
		// serialised, so this does not happen; if it did, date the
		// delay there is in full, as a new master would.
		if d, ok := w.g.sm.delayOf(key); ok {
			delete(w.delays, key)
			w.startDelay(key, d.ms, now)
		}
	}
}

// delayInfo adds what is left of key's lock-delay to resp (RetryAfterMs),
// if it has one.
func (w *worker) delayInfo(resp *wire.Response, key string) {
	if len(w.delays) == 0 {
		return
	}
	if end, ok := w.delays[key]; ok {
		if left := time.Duration(end - w.mono(w.clock.Now())); left > 0 {
			resp.RetryAfterMs = uint32((left + time.Millisecond - 1) / time.Millisecond)
		}
	}
}
