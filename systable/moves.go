package systable

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/paxos"
)

// Moving a namespace to another cluster (docs/design.md, "Moving a
// namespace"): every lock group keeps, per namespace that is or was
// moving, a move record (moverecord.go). No record is the usual case: the
// group serves the namespace.
//
//	incoming  the target, before the flip: imports are applied, every
//	          request of the namespace is answered MOVING
//	frozen    the source, from its freeze on: nothing of the
//	          namespace changes (the state machine refuses every lock
//	          command of it), requests are answered MOVING
//	owned     the target, from its own step on: served as usual
//	dropped   the source, from its drop on: the namespace's records are
//	          gone, requests are answered MOVED with the target's
//	          addresses (a tombstone)
//
// Move records are written at checkpoints with the lock records they go
// with, so that a restart never finds an import recorded as applied whose
// records it lacks.

// MoveStep is a step of a namespace move that one lock group takes.
type MoveStep uint8

// Move steps.
const (
	// StepIncoming: the target answers the namespace's requests MOVING
	// and accepts imports (the group must hold none of its keys).
	StepIncoming MoveStep = iota + 1
	// StepFreeze: the source changes nothing of the namespace from here.
	StepFreeze
	// StepOwn: the target serves the namespace (the flip).
	StepOwn
	// StepDrop: the source deletes the namespace's records and answers
	// MOVED with movedTo.
	StepDrop
	// StepUnfreeze: the abort: a frozen source serves again, an
	// incoming target drops what it imported. Allowed up to the flip.
	StepUnfreeze
	// StepImport: an incoming target applies a batch of the source's
	// records (EncodeImportBatch).
	StepImport
)

// MoveOutcome is the outcome of a move step as every replica of the
// group computes it. It never leaves the node: the proposer turns it
// into an error.
type MoveOutcome uint8

// Move step outcomes.
const (
	// MoveApplied: the step was applied, or repeated with the same id
	// (every step is idempotent).
	MoveApplied MoveOutcome = iota + 1
	// MoveConflict: the namespace's move state does not allow the step,
	// or the step's mover token is below the highest applied.
	MoveConflict
	// MoveMalformed: the step's data is malformed, or an import batch
	// holds a record that is not the namespace's.
	MoveMalformed
)

// String returns applied, conflict, malformed, or the number of another
// value.
func (o MoveOutcome) String() string {
	switch o {
	case MoveApplied:
		return "applied"
	case MoveConflict:
		return "conflict"
	case MoveMalformed:
		return "malformed"
	}
	return fmt.Sprintf("MoveOutcome(%d)", uint8(o))
}

// Gate is what a namespace's move state answers its requests with while
// it keeps the group from serving them: MOVING (incoming, frozen) or,
// Moved, MOVED with the target's client addresses (dropped).
type Gate struct {
	Moved   bool
	MovedTo string
}

// gate returns the gate of r's state, false for a served one.
func (r *moveRec) gate() (Gate, bool) {
	switch r.st {
	case MoveIncoming, MoveFrozen:
		return Gate{}, true
	case MoveDropped:
		return Gate{Moved: true, MovedTo: r.movedTo}, true
	}
	return Gate{}, false
}

// MoveNews is a move state applied, for the master's workers.
type MoveNews struct {
	NS    string
	State MoveState
}

// MoveLocks is what a move step does to the lock table of its group.
type MoveLocks interface {
	// Holds reports whether the group holds keys of namespace ns.
	Holds(ns string) bool
	// Drop deletes every record of namespace ns.
	Drop(ns string)
	// Import applies an import batch's pairs, all of namespace ns, once
	// all of them decode and are ns's; an error changes nothing.
	Import(ns string, pairs []byte) error
}

// Moves is one lock group's move records. Its owner serialises every
// call (the state machine's lock) but Gate and Gated, which read the
// gates published after each change without a lock. The zero value has
// no record.
type Moves struct {
	recs  map[string]*moveRec
	dirty map[string]struct{} // changed since the last checkpoint
	news  []MoveNews          // applied since the last TakeNews
	gates atomic.Pointer[map[string]Gate]
}

// Gate returns the gate of namespace ns, false when it is served.
func (t *Moves) Gate(ns string) (Gate, bool) {
	p := t.gates.Load()
	if p == nil {
		return Gate{}, false
	}
	g, ok := (*p)[ns]
	return g, ok
}

// Gated reports whether any namespace is gated (the usual case: none).
func (t *Moves) Gated() bool { return t.gates.Load() != nil }

// Empty reports whether the group has no move record (the usual case).
func (t *Moves) Empty() bool { return len(t.recs) == 0 }

// Blocks returns the gate of namespace ns as the records hold it, false
// when it is served: what the lock table refuses a command with.
func (t *Moves) Blocks(ns string) (Gate, bool) {
	r := t.recs[ns]
	if r == nil {
		return Gate{}, false
	}
	return r.gate()
}

// Info returns namespace ns's move state, the move's id, a dropped
// namespace's target addresses and how many import batches the group
// applied.
func (t *Moves) Info(ns string) (st MoveState, id, movedTo string, batches int) {
	if r := t.recs[ns]; r != nil {
		return r.st, r.id, r.movedTo, len(r.batches)
	}
	return MoveNone, "", "", 0
}

// TakeNews returns the move states applied since the last call.
func (t *Moves) TakeNews() []MoveNews {
	n := t.news
	t.news = nil
	return n
}

// Apply applies step of namespace ns's move, fenced by the mover's token
// (0: none) and with data EncodeMoveData's, to the records and, through
// locks, to the lock table.
func (t *Moves) Apply(step MoveStep, ns string, token uint64, data []byte, locks MoveLocks) MoveOutcome {
	if r := t.recs[ns]; r != nil && token < r.fence {
		return MoveConflict
	}
	out := t.apply(step, ns, data, locks)
	if out == MoveApplied && token > 0 {
		t.raiseFence(ns, token)
	}
	return out
}

// raiseFence records token as ns's highest mover token, keeping a record
// in state none for it if the namespace has no other.
func (t *Moves) raiseFence(ns string, token uint64) {
	r := t.recs[ns]
	switch {
	case r == nil:
		t.set(ns, &moveRec{st: MoveNone, fence: token})
	case token > r.fence:
		r.fence = token
		t.note(ns)
	}
}

// apply applies a step whose token passed the fence.
func (t *Moves) apply(step MoveStep, ns string, data []byte, locks MoveLocks) MoveOutcome {
	id, rest, ok := splitMoveData(data)
	if !ok || id == "" || wire.ValidateNamespace(ns) != nil {
		return MoveMalformed
	}
	r := t.recs[ns]
	st := MoveNone
	if r != nil {
		st = r.st
	}
	same := r != nil && r.id == id && st != MoveNone
	switch step {
	case StepIncoming:
		switch {
		case same && (st == MoveIncoming || st == MoveOwned):
			return MoveApplied // repeated
		case st == MoveNone && locks.Holds(ns):
			return MoveConflict // the group serves the namespace: it is not incoming
		case st == MoveNone:
			t.set(ns, &moveRec{st: MoveIncoming, id: id})
		case st == MoveDropped:
			// Moving back: the tombstone's addresses are kept for an
			// abort, which restores the tombstone.
			t.set(ns, &moveRec{st: MoveIncoming, id: id, movedTo: r.movedTo})
		default:
			return MoveConflict
		}
	case StepFreeze:
		switch {
		case same && st == MoveFrozen:
		case st == MoveNone, st == MoveOwned:
			t.set(ns, &moveRec{st: MoveFrozen, id: id})
		default:
			return MoveConflict
		}
	case StepOwn:
		switch {
		case same && st == MoveOwned:
		case same && st == MoveIncoming:
			r.st = MoveOwned
			r.batches = nil
			t.note(ns)
		default:
			return MoveConflict
		}
	case StepUnfreeze:
		return t.unfreeze(ns, r, same, locks)
	case StepDrop:
		switch {
		case same && st == MoveDropped:
		case same && st == MoveFrozen:
			locks.Drop(ns)
			t.set(ns, &moveRec{st: MoveDropped, id: id, movedTo: string(rest)})
		default:
			return MoveConflict
		}
	case StepImport:
		return t.applyImport(ns, r, id, rest, locks)
	default:
		return MoveMalformed
	}
	return MoveApplied
}

// unfreeze applies the abort of the move of namespace ns whose record is
// r (same: of this move).
func (t *Moves) unfreeze(ns string, r *moveRec, same bool, locks MoveLocks) MoveOutcome {
	st := MoveNone
	if r != nil {
		st = r.st
	}
	switch {
	case st == MoveNone:
		// Never frozen here, or unfrozen already.
	case same && st == MoveFrozen:
		t.set(ns, nil)
	case same && st == MoveDropped && r.aborted:
		// Aborted already.
	case same && st == MoveIncoming && r.movedTo != "":
		locks.Drop(ns)
		t.set(ns, &moveRec{st: MoveDropped, id: r.id, movedTo: r.movedTo, aborted: true})
	case same && st == MoveIncoming:
		locks.Drop(ns)
		t.set(ns, nil)
	default:
		return MoveConflict
	}
	return MoveApplied
}

// applyImport applies an import batch of incoming namespace ns: data is
// EncodeImportBatch's. A batch applied already changes nothing.
func (t *Moves) applyImport(ns string, r *moveRec, id string, data []byte, locks MoveLocks) MoveOutcome {
	if r == nil || r.id != id || r.st != MoveIncoming {
		if r != nil && r.id == id && r.st == MoveOwned {
			return MoveApplied // a late repeat
		}
		return MoveConflict
	}
	rd := codec.NewReader(data)
	b := batchID{src: readU32(&rd), batch: readU32(&rd)}
	if rd.Failed() {
		return MoveMalformed
	}
	if _, done := r.batches[b]; done {
		return MoveApplied
	}
	if err := locks.Import(ns, rd.Rest()); err != nil {
		return MoveMalformed
	}
	if r.batches == nil {
		r.batches = make(map[batchID]struct{})
	}
	r.batches[b] = struct{}{}
	t.note(ns)
	return MoveApplied
}

// set replaces ns's move record (nil: none).
func (t *Moves) set(ns string, r *moveRec) {
	if r == nil {
		delete(t.recs, ns)
	} else {
		if t.recs == nil {
			t.recs = make(map[string]*moveRec)
		}
		t.recs[ns] = r
	}
	t.note(ns)
}

// note records that ns's move record changed: for the next checkpoint,
// the gates and the news.
func (t *Moves) note(ns string) {
	if t.dirty == nil {
		t.dirty = make(map[string]struct{})
	}
	t.dirty[strings.Clone(ns)] = struct{}{}
	t.Publish()
	st := MoveNone
	if r := t.recs[ns]; r != nil {
		st = r.st
	}
	t.news = append(t.news, MoveNews{NS: strings.Clone(ns), State: st})
}

// Publish rebuilds the gates Gate reads from the records. The map is
// replaced, never changed, so a reader needs one atomic load and no
// lock; nil when no namespace is gated, the usual case.
func (t *Moves) Publish() {
	var m map[string]Gate
	for ns, r := range t.recs {
		if g, ok := r.gate(); ok {
			if m == nil {
				m = make(map[string]Gate)
			}
			m[ns] = g
		}
	}
	if m == nil {
		t.gates.Store(nil)
		return
	}
	t.gates.Store(&m)
}

// Reset empties the records for a load from a checkpoint (Publish once
// it is done).
func (t *Moves) Reset() {
	t.recs, t.dirty = nil, nil
}

// LoadPair reads one move record (IsMoveKey) during a load.
func (t *Moves) LoadPair(k, v []byte) error {
	r, err := decodeMoveRec(v)
	if err != nil {
		return fmt.Errorf("group: move record of %q: %w", k[1:], err)
	}
	if t.recs == nil {
		t.recs = make(map[string]*moveRec)
	}
	t.recs[string(k[1:])] = r
	return nil
}

// Checkpoint writes the move records changed since the last checkpoint.
func (t *Moves) Checkpoint(w paxos.Writer) {
	for ns := range t.dirty {
		k := append([]byte{movePrefix}, ns...)
		if r := t.recs[ns]; r != nil {
			w.Set(k, encodeMoveRec(nil, r))
		} else {
			w.Delete(k)
		}
	}
	clear(t.dirty)
}

// Equal reports whether t and o hold the same records (as a reload of a
// checkpoint must).
func (t *Moves) Equal(o *Moves) bool {
	if len(t.recs) != len(o.recs) {
		return false
	}
	for ns, r := range t.recs {
		x := o.recs[ns]
		if x == nil || string(encodeMoveRec(nil, r)) != string(encodeMoveRec(nil, x)) {
			return false
		}
	}
	return true
}

// Namespaces returns the namespaces with a record.
func (t *Moves) Namespaces() []string {
	out := make([]string, 0, len(t.recs))
	for ns := range t.recs {
		out = append(out, ns)
	}
	return out
}
