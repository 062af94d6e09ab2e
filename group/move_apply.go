package group

import (
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// opSteps is the move step of each move op.
var opSteps = [...]systable.MoveStep{
	opIncoming:      systable.StepIncoming,
	opFreeze:        systable.StepFreeze,
	opOwn:           systable.StepOwn,
	opDropNamespace: systable.StepDrop,
	opUnfreeze:      systable.StepUnfreeze,
	opImport:        systable.StepImport,
}

// applyMove applies a move command (ops 22..27) to the group's move
// records and, through moveLocks, its lock table. Called with sm.mu held.
func (sm *StateMachine) applyMove(c *command) systable.MoveOutcome {
	return sm.moves.Apply(opSteps[c.op], c.key, c.token, c.data, moveLocks{sm})
}

// moveLocks is what a move step does to the lock table (sm.mu held).
type moveLocks struct{ sm *StateMachine }

// Holds reports whether the group holds keys of namespace ns.
func (m moveLocks) Holds(ns string) bool { return m.sm.nsHeld[ns].keys > 0 }

// Drop deletes every record of namespace ns (dropRecords).
func (m moveLocks) Drop(ns string) { m.sm.dropRecords(ns) }

// Import applies an import batch's pairs (codec.AppendPair) of lock
// records ('l') and lock-delay records ('d') of ns, all checked first: a
// bad batch changes nothing. Imported holds keep their owners, tokens,
// TTLs, values and lock-delays; their deadlines are the master's, set
// when the namespace is owned (worker.onMove).
func (m moveLocks) Import(ns string, pairs []byte) error {
	sm := m.sm
	recs, delays, err := decodeImport(ns, pairs)
	if err != nil {
		return err
	}
	for _, x := range recs {
		s := sm.shardOf(x.key)
		s.mu.Lock()
		l := s.locks[x.key]
		was := l.n()
		if was > 0 {
			s.stamp(x.l)
			s.locks[x.key] = x.l // replaced: put stamps and indexes only a new key
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
	return nil
}

var _ systable.MoveLocks = moveLocks{}

// checkpointMoves writes the move records changed since the last
// checkpoint (sm.mu held).
func (sm *StateMachine) checkpointMoves(w paxos.Writer) { sm.moves.Checkpoint(w) }

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
