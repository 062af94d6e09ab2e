package group

import (
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/wire"
)

// moveOutcome is the outcome of a move step as every replica of the
// group computes it, which proposeMove turns into an error.
type moveOutcome uint8

// Move step outcomes.
const (
	// moveApplied: the step was applied, or repeated with the same id
	// (every step is idempotent).
	moveApplied moveOutcome = iota + 1
	// moveConflict: the namespace's move state does not allow the step,
	// or the command's mover token is below the highest applied
	// (ErrMoveConflict).
	moveConflict
	// moveBadCommand: the command is malformed (ErrMoveBadBatch).
	moveBadCommand
)

// applyMove applies a move command (ops 22..27) and returns its outcome.
// Called with sm.mu held.
func (sm *StateMachine) applyMove(c *command) moveOutcome {
	if r := sm.moves[c.key]; r != nil && c.token < r.fence {
		return moveConflict
	}
	out := sm.applyMoveStep(c)
	if out == moveApplied && c.token > 0 {
		sm.raiseFence(c.key, c.token)
	}
	return out
}

// raiseFence records token as ns's highest mover token, keeping a record
// in state none for it if the namespace has no other (sm.mu held).
func (sm *StateMachine) raiseFence(ns string, token uint64) {
	r := sm.moves[ns]
	switch {
	case r == nil:
		sm.setMove(ns, &moveRec{st: MoveNone, fence: token})
	case token > r.fence:
		r.fence = token
		sm.noteMove(ns)
	}
}

// applyMoveStep applies a move command whose token passed the fence.
func (sm *StateMachine) applyMoveStep(c *command) moveOutcome {
	ns := c.key
	id, rest, ok := splitMoveData(c.data)
	if !ok || id == "" || wire.ValidateNamespace(ns) != nil {
		return moveBadCommand
	}
	r := sm.moves[ns]
	st := MoveNone
	if r != nil {
		st = r.st
	}
	same := r != nil && r.id == id && st != MoveNone
	conflict := moveConflict
	switch c.op {
	case opIncoming:
		switch {
		case same && (st == MoveIncoming || st == MoveOwned):
			return moveApplied // repeated
		case st == MoveNone && sm.nsHeld[ns].keys > 0:
			return conflict // the group serves the namespace: it is not incoming
		case st == MoveNone:
			sm.setMove(ns, &moveRec{st: MoveIncoming, id: id})
		case st == MoveDropped:
			// Moving back: the tombstone's addresses are kept for an
			// abort, which restores the tombstone.
			sm.setMove(ns, &moveRec{st: MoveIncoming, id: id, movedTo: r.movedTo})
		default:
			return conflict
		}
	case opFreeze:
		switch {
		case same && st == MoveFrozen:
		case st == MoveNone, st == MoveOwned:
			sm.setMove(ns, &moveRec{st: MoveFrozen, id: id})
		default:
			return conflict
		}
	case opOwn:
		switch {
		case same && st == MoveOwned:
		case same && st == MoveIncoming:
			r.st = MoveOwned
			r.batches = nil
			sm.noteMove(ns)
		default:
			return conflict
		}
	case opUnfreeze:
		switch {
		case st == MoveNone:
			// Never frozen here, or unfrozen already.
		case same && st == MoveFrozen:
			sm.setMove(ns, nil)
		case same && st == MoveDropped && r.aborted:
			// Aborted already.
		case same && st == MoveIncoming && r.movedTo != "":
			sm.dropRecords(ns)
			sm.setMove(ns, &moveRec{st: MoveDropped, id: id, movedTo: r.movedTo, aborted: true})
		case same && st == MoveIncoming:
			sm.dropRecords(ns)
			sm.setMove(ns, nil)
		default:
			return conflict
		}
	case opDropNamespace:
		to := string(rest)
		switch {
		case same && st == MoveDropped:
		case same && st == MoveFrozen:
			sm.dropRecords(ns)
			sm.setMove(ns, &moveRec{st: MoveDropped, id: id, movedTo: to})
		default:
			return conflict
		}
	case opImport:
		return sm.applyImport(ns, r, id, rest)
	}
	return moveApplied
}

// setMove replaces ns's move record (nil: none). Called with sm.mu held.
func (sm *StateMachine) setMove(ns string, r *moveRec) {
	if r == nil {
		delete(sm.moves, ns)
	} else {
		if sm.moves == nil {
			sm.moves = make(map[string]*moveRec)
		}
		sm.moves[ns] = r
	}
	sm.noteMove(ns)
}

// applyImport applies an import batch of incoming namespace ns: data is
// the source group and batch number, then pairs (codec.AppendPair) of lock
// records ('l') and lock-delay records ('d') of ns. A batch applied
// already changes nothing. Imported holds keep their owners, tokens,
// TTLs, values and lock-delays; their deadlines are the master's, set
// when the namespace is owned (worker.onMove). Called with sm.mu held.
func (sm *StateMachine) applyImport(ns string, r *moveRec, id string, data []byte) moveOutcome {
	if r == nil || r.id != id || r.st != MoveIncoming {
		if r != nil && r.id == id && r.st == MoveOwned {
			return moveApplied // a late repeat
		}
		return moveConflict
	}
	rd := newReader(data)
	b := batchID{src: rd.u32(), batch: rd.u32()}
	if rd.Failed() {
		return moveBadCommand
	}
	if _, done := r.batches[b]; done {
		return moveApplied
	}
	recs, delays, err := decodeImport(ns, rd.Rest())
	if err != nil {
		return moveBadCommand
	}
	for _, x := range recs {
		s := sm.shardOf(x.key)
		s.mu.Lock()
		l := s.locks[x.key]
		was := l.n()
		if was > 0 {
			s.locks[x.key] = x.l // replaced: put indexes only a new key
		}
		sm.put(x.key, s, x.l, was)
		s.mu.Unlock()
	}
	for _, x := range delays {
		s := sm.shardOf(x.key)
		s.mu.Lock()
		s.noteDelay(x.key)
		if s.delays == nil {
			s.delays = make(map[string]delayRec)
		}
		s.delays[x.key] = x.d
		s.mu.Unlock()
	}
	if r.batches == nil {
		r.batches = make(map[batchID]struct{})
	}
	r.batches[b] = struct{}{}
	sm.noteMove(ns)
	return moveApplied
}

type importedRec struct {
	key string
	l   *lockRec
}

type importedDelay struct {
	key string
	d   delayRec
}

// decodeImport decodes and checks an import batch's pairs, all of
// namespace ns, before anything is applied: a bad batch changes nothing.
func decodeImport(ns string, pairs []byte) ([]importedRec, []importedDelay, error) {
	var (
		recs   []importedRec
		delays []importedDelay
	)
	err := codec.EachPair(pairs, func(k, v []byte) error {
		if len(k) < 2 || splitNS(string(k[1:])) != ns || !hasNS(string(k[1:])) {
			return ErrMoveBadBatch
		}
		key := string(k[1:])
		switch k[0] {
		case lockPrefix:
			l, err := decodeRec(v)
			if err != nil || l.n() == 0 {
				return ErrMoveBadBatch
			}
			recs = append(recs, importedRec{key, l})
		case delayPrefix:
			d, err := decodeDelayRecord(v)
			if err != nil {
				return ErrMoveBadBatch
			}
			delays = append(delays, importedDelay{key, d})
		default:
			return ErrMoveBadBatch
		}
		return nil
	})
	return recs, delays, err
}

// hasNS reports whether full key has a namespace part.
func hasNS(full string) bool {
	for i := 0; i < len(full); i++ {
		if full[i] == 0 {
			return true
		}
	}
	return false
}

// dropRecords deletes every lock, lock-delay and revoked-holds record of
// namespace ns from the table (a dropped source, an aborted target).
// Called with sm.mu held.
func (sm *StateMachine) dropRecords(ns string) {
	for i := range sm.shards {
		s := &sm.shards[i]
		s.mu.Lock()
		for _, key := range s.nsKeysOf(ns) {
			l := s.locks[key]
			was := l.n()
			l.first = holder{}
			l.x = nil
			sm.put(key, s, l, was)
		}
		for key := range s.delays {
			if splitNS(key) == ns {
				s.noteDelay(key)
				delete(s.delays, key)
			}
		}
		s.dropRevoked(ns)
		s.mu.Unlock()
	}
}
