package group

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/systable"
)

// MoveStep is a step of a namespace move that one lock group takes
// (docs/design.md, "Moving a namespace"; systable.MoveStep).
type MoveStep = systable.MoveStep

// Move steps (systable's; StepImport is Import's).
const (
	// StepIncoming: the target answers the namespace's requests MOVING
	// and accepts imports (the group must hold none of its keys).
	StepIncoming = systable.StepIncoming
	// StepFreeze: the source changes nothing of the namespace from here.
	StepFreeze = systable.StepFreeze
	// StepOwn: the target serves the namespace (the flip).
	StepOwn = systable.StepOwn
	// StepDrop: the source deletes the namespace's records and answers
	// MOVED with movedTo.
	StepDrop = systable.StepDrop
	// StepUnfreeze: the abort: a frozen source serves again, an
	// incoming target drops what it imported. Allowed up to the flip.
	StepUnfreeze = systable.StepUnfreeze
)

var stepOps = [...]op{StepIncoming: opIncoming, StepFreeze: opFreeze, StepOwn: opOwn, StepDrop: opDropNamespace, StepUnfreeze: opUnfreeze}

// MoveStep proposes step for namespace ns under move id in the group,
// which this node must serve (else ErrNotMaster), and returns once it is
// applied. A step repeated with the same id succeeds and changes
// nothing; a step the namespace's state does not allow is
// ErrMoveConflict. movedTo (StepDrop) is the target's client addresses,
// comma-separated. fence is the mover lock's token (0: none): a step
// whose fence is below the highest the namespace's record holds in the
// group is refused with ErrMoveConflict. When ctx ends first the outcome
// is unknown: repeat the step.
func (g *Group) MoveStep(ctx context.Context, step MoveStep, ns, id, movedTo string, fence uint64) error {
	if step < StepIncoming || step > StepUnfreeze {
		return fmt.Errorf("group: move step %d: %w", step, ErrMoveConflict)
	}
	var rest []byte
	if step == StepDrop {
		rest = []byte(movedTo)
	}
	return g.proposeMove(ctx, &command{op: stepOps[step], key: ns, token: fence, data: systable.EncodeMoveData(id, rest)})
}

// Import proposes a batch of an incoming namespace's records (pairs as
// ExportMove gives them, those that hash to this group: Service.SplitImport)
// under move id, named by the source group and batch number: a batch
// applied already changes nothing; fence is fenced as MoveStep's. This
// node must serve the group (else ErrNotMaster).
func (g *Group) Import(ctx context.Context, ns, id string, src, batch uint32, pairs []byte, fence uint64) error {
	data := systable.EncodeImportBatch(src, batch, pairs)
	return g.proposeMove(ctx, &command{op: opImport, key: ns, token: fence, data: systable.EncodeMoveData(id, data)})
}

func (g *Group) proposeMove(ctx context.Context, c *command) error {
	if err := wire.ValidateNamespace(c.key); err != nil {
		return err
	}
	if !g.px.Status().Serving {
		return ErrNotMaster
	}
	res, err := propose(ctx, g.px, appendCommand(nil, c))
	switch {
	case errors.Is(err, paxos.ErrNotMaster), errors.Is(err, paxos.ErrNotChosen):
		return ErrNotMaster
	case errors.Is(err, paxos.ErrTooLarge):
		// Repeating it cannot help: the batch's records of this group
		// exceed one Paxos batch.
		return fmt.Errorf("group %d: %w: %w", g.id, ErrMoveBadBatch, err)
	case err != nil:
		return fmt.Errorf("group: move step in group %d: %w", g.id, err)
	}
	switch o, _ := res.Value.(systable.MoveOutcome); o {
	case systable.MoveApplied:
	case systable.MoveConflict:
		return fmt.Errorf("group %d: %w", g.id, ErrMoveConflict)
	case systable.MoveMalformed:
		return fmt.Errorf("group %d: %w", g.id, ErrMoveBadBatch)
	default:
		return fmt.Errorf("group: move step in group %d: outcome %v", g.id, res.Value)
	}
	return nil
}

// MoveExport describes a group's export of a frozen namespace.
type MoveExport struct {
	// Version is the group version: the target's must exceed every
	// source group's before it grants anything of the namespace.
	Version uint64
	// Applied is the group's applied instance when the export began
	// (the namespace's records are those of its freeze point).
	Applied uint64
	Batches int
	Locks   int
	Pairs   int
}

// ExportMove reads namespace ns's records from this replica, which must
// have applied the group's freeze of move id (else ErrMoveConflict):
// nothing of the namespace changes after it, so every replica that has
// applied it holds the same records, those of the freeze point. It
// calls f with batches of pairs (codec.AppendPair: 'l' + full key -> lock
// record, 'd' + full key -> lock-delay record, the backup encoding) of
// about maxBytes each (a larger record gets a batch of its own).
func (g *Group) ExportMove(ns, id string, maxBytes int, f func(pairs []byte) error) (MoveExport, error) {
	info := g.sm.MoveInfo(ns)
	if info.State != MoveFrozen || info.ID != id {
		return MoveExport{}, fmt.Errorf("group %d: namespace %q is %s (move %q), not frozen by move %q: %w", g.id, ns, info.State, info.ID, id, ErrMoveConflict)
	}
	ex := MoveExport{Version: g.sm.Version(), Applied: g.sm.Applied()}
	var buf []byte
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		ex.Batches++
		err := f(buf)
		buf = nil
		return err
	}
	for i := range g.sm.shards {
		pairs, locks, n := g.sm.shardPairs(i, ns)
		ex.Locks += locks
		ex.Pairs += n
		err := codec.EachPair(pairs, func(k, v []byte) error {
			if len(buf) > 0 && len(buf)+len(k)+len(v)+2*binary.MaxVarintLen64 > maxBytes {
				if err := flush(); err != nil {
					return err
				}
			}
			buf = codec.AppendPair(buf, k, v)
			return nil
		})
		if err != nil {
			return ex, err
		}
	}
	return ex, flush()
}

// shardPairs encodes shard i's lock and lock-delay records of namespace
// ns as pairs, in key order, and counts them. The order matters: an
// export repeated after a driver's crash, on this replica or another,
// must cut the same batches, since the target applies each (source
// group, batch number) once and skips it when repeated.
func (sm *StateMachine) shardPairs(i int, ns string) (pairs []byte, locks, n int) {
	s := &sm.shards[i]
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys := s.nsKeysOf(ns) // in key order
	var k, v []byte
	for _, key := range keys {
		k = append(append(k[:0], lockPrefix), key...)
		v = encodeRec(v[:0], s.locks[key])
		pairs = codec.AppendPair(pairs, k, v)
		locks++
		n++
	}
	keys = keys[:0]
	for key := range s.delays {
		if splitNS(key) == ns {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	for _, key := range keys {
		k = append(append(k[:0], delayPrefix), key...)
		v = encodeDelay(v[:0], s.delays[key])
		pairs = codec.AppendPair(pairs, k, v)
		n++
	}
	return pairs, locks, n
}

// SplitImport splits a batch of namespace ns's pairs (ExportMove's) by the
// lock group of this service each key belongs to: the clusters may have
// different group counts. A pair of another namespace or of an unknown
// kind is ErrMoveBadBatch.
func (s *Service) SplitImport(ns string, pairs []byte) (map[int][]byte, error) {
	out := make(map[int][]byte)
	err := codec.EachPair(pairs, func(k, v []byte) error {
		if len(k) < 2 || (k[0] != lockPrefix && k[0] != delayPrefix) {
			return ErrMoveBadBatch
		}
		full := string(k[1:])
		if !hasNS(full) || splitNS(full) != ns {
			return fmt.Errorf("%w: a record of another namespace", ErrMoveBadBatch)
		}
		g := wire.GroupOf(hashFull(full), len(s.groups))
		out[g] = codec.AppendPair(out[g], k, v)
		return nil
	})
	if err != nil {
		if !errors.Is(err, ErrMoveBadBatch) {
			err = fmt.Errorf("%w: %w", ErrMoveBadBatch, err)
		}
		return nil, err
	}
	return out, nil
}

// NamespaceRecord returns namespace ns's record in the namespace table
// (its SCRAM verifier, as replicated), false if the namespace does not
// exist: a move installs it on the target (PutNamespaceRecord), so that
// the namespace's clients authenticate there with the same secret.
func (s *Service) NamespaceRecord(ns string) ([]byte, bool) {
	return s.namespaces().Record(ns)
}

// PutNamespaceRecord creates namespace ns, or replaces its record, with
// rec as NamespaceRecord returns it. It must run on the master of group 0
// (else ErrNotSystemMaster); a malformed record is wire.ErrInvalid.
func (s *Service) PutNamespaceRecord(ctx context.Context, ns string, rec []byte) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	if _, _, err := systable.ParseNamespaceRecord(rec); err != nil {
		return fmt.Errorf("%w: namespace record: %w", wire.ErrInvalid, err)
	}
	return s.proposeNamespace(ctx, &command{op: opNamespacePut, key: ns, data: rec})
}
