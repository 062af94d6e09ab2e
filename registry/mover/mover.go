// Package mover drives the move of a namespace from one lock cluster to
// another (docs/design.md, "Moving a namespace: the protocol").
//
// A move is a record in the meta cluster (Move) whose State is the next
// step to take. Drive takes the steps in order, each one idempotent on
// the clusters, and records each state in the meta cluster before
// taking the next step, every record fenced by the token of the mover
// lock its caller holds, so that a driver that stalled past its lock's
// lease writes nothing. A driver that takes the lock over reads the
// record and calls Drive again: the step in the record is repeated
// (harmless, being idempotent) and the move goes on from there.
//
// The clusters' side of every step (freezing a namespace in each
// source group's log, exporting its records, importing them with the
// target's group version raised, taking ownership, dropping the
// source's copy) is behind the Cluster interface; the meta cluster's
// records behind Table.
package mover

import (
	"context"
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/adminapi"
)

// State is the step a move takes next.
type State string

// The states of a move, in order; Aborting and Aborted are the other
// way out, allowed until the flip.
const (
	// Prepare: the target accepts the namespace's clients and answers
	// them MOVING.
	Prepare State = "prepare"
	// Freeze: every source group freezes the namespace (a replicated
	// command: from it on, the group changes nothing of the namespace).
	Freeze State = "freeze"
	// Copy: the target imports the namespace's records as of the
	// freeze, then raises its groups' version above every source
	// group's.
	Copy State = "copy"
	// Flip: the meta cluster has assigned the namespace to the target
	// (recording this state did), and the target's groups serve it.
	Flip State = "flip"
	// Drop: the source deletes the namespace, keeping a tombstone that
	// sends its clients to the target.
	Drop State = "drop"
	// Done: the move is over.
	Done State = "done"
	// Aborting: the target forgets what it imported, the source serves
	// again.
	Aborting State = "aborting"
	// Aborted: the move was undone.
	Aborted State = "aborted"
)

// Ended reports whether s is a final state.
func (s State) Ended() bool { return s == Done || s == Aborted }

// Flipped reports whether the move is past the point of no return: the
// namespace is assigned to the target.
func (s State) Flipped() bool { return s == Flip || s == Drop || s == Done }

// Move is a move's record in the meta cluster.
type Move struct {
	// Namespace moves from cluster From to cluster To.
	Namespace, From, To string
	// ID tells this move apart from earlier moves of the namespace; the
	// clusters key their idempotence on it.
	ID uint64
	// State is the next step.
	State State
}

// Errors of Drive and Abort.
var (
	// ErrFenced means the meta cluster refused a record: another driver
	// holds the mover lock with a newer token. The caller stops driving.
	ErrFenced = errors.New("mover: fenced by a newer mover lock")
	// ErrFlipped refuses to abort a move that has flipped: it only rolls
	// forward.
	ErrFlipped = errors.New("mover: the move has flipped and can only complete")
	// ErrEnded means the move is already over.
	ErrEnded = errors.New("mover: the move has ended")
	// ErrRefused means a cluster refused a step: its token is below the
	// highest the cluster has seen for the namespace, or the namespace's
	// state there does not allow the step (another move of it).
	ErrRefused = errors.New("mover: a cluster refused the step")
)

// Table is the meta cluster's side of a move. Every write carries the
// mover lock's token; one carrying a token below the highest the table
// has seen is refused with an error wrapping ErrFenced.
type Table interface {
	// PutMove records m. Recording Flip (or a later state) over an
	// earlier one also assigns the namespace to m.To, its epoch raised,
	// in the same replicated command: the registries push the new
	// cluster to the namespace's clients, which the target answers
	// MOVING until its groups own the namespace.
	PutMove(ctx context.Context, m Move, token uint64) error
	// Verifier is the namespace's SCRAM verifier, which the target
	// installs so that the namespace's clients can authenticate.
	Verifier(ctx context.Context, namespace string) (adminapi.Verifier, error)
}

// Cluster is a lock cluster's side of a move: each call acts on every
// lock group of the cluster and returns once each group has applied it
// (or fails); each is idempotent for a given move id. Each carries the
// mover lock's token, and a cluster refuses (ErrFenced) a call whose
// token is below the highest it has seen for the namespace, so that a
// driver that stalled cannot freeze, unfreeze or forget a namespace
// behind the back of the one that took over.
type Cluster interface {
	// Addrs are the cluster's client addresses, given to the source's
	// tombstone so that stale clients find the target.
	Addrs() []string
	// Incoming makes the cluster accept the namespace's clients (with
	// verifier) and answer them MOVING until Own.
	Incoming(ctx context.Context, token uint64, ns string, id uint64, verifier adminapi.Verifier) error
	// Freeze freezes the namespace in every group.
	Freeze(ctx context.Context, token uint64, ns string, id uint64) error
	// Export calls fn with the frozen namespace's records of every group,
	// in batches numbered from 0 within each group (the same batches
	// every time), read from replicas that applied the freeze — fn may
	// be called from several goroutines at once, one per group — and
	// returns the highest group version among them: every token the
	// source granted of the namespace is below (version+1)<<48.
	Export(ctx context.Context, token uint64, ns string, id uint64, fn func(group, batch int, pairs []byte) error) (version uint64, err error)
	// RaiseVersion raises every group's version to at least min.
	RaiseVersion(ctx context.Context, token uint64, ns string, min uint64) error
	// Import installs a batch exported by the source's group srcGroup,
	// each record in the group its key hashes to; a batch applied before
	// changes nothing.
	Import(ctx context.Context, token uint64, ns string, id uint64, srcGroup, batch int, pairs []byte) error
	// Own makes every group serve the namespace.
	Own(ctx context.Context, token uint64, ns string, id uint64) error
	// Drop deletes the namespace's records and keeps a tombstone that
	// answers its clients MOVED with movedTo.
	Drop(ctx context.Context, token uint64, ns string, id uint64, movedTo []string) error
	// Unfreeze undoes Freeze (abort, at the source).
	Unfreeze(ctx context.Context, token uint64, ns string, id uint64) error
	// Forget deletes what Incoming and Import installed, without a
	// tombstone (abort, at the target).
	Forget(ctx context.Context, token uint64, ns string, id uint64) error
}

// Clusters finds a lock cluster by name.
type Clusters func(name string) (Cluster, error)

// Drive takes m's steps from its State to Done, recording each state in
// tab (fenced by token) before the step after it. It returns the move as
// last recorded; an error leaves the move where it stopped, for this or
// another driver to resume.
func Drive(ctx context.Context, m Move, tab Table, clusters Clusters, token uint64) (Move, error) {
	if m.State == Aborting {
		return finishAbort(ctx, m, tab, clusters, token)
	}
	from, to, err := endpoints(m, clusters)
	if err != nil {
		return m, err
	}
	for !m.State.Ended() {
		next, err := step(ctx, m, tab, from, to, token)
		if err != nil {
			return m, fmt.Errorf("mover: %s of %q (%s → %s, move %d): %w", m.State, m.Namespace, m.From, m.To, m.ID, err)
		}
		m.State = next
		if err := tab.PutMove(ctx, m, token); err != nil {
			return m, fmt.Errorf("mover: record %s of %q: %w", next, m.Namespace, err)
		}
	}
	return m, nil
}

// step takes m's step and returns the state after it.
func step(ctx context.Context, m Move, tab Table, from, to Cluster, token uint64) (State, error) {
	ns, id := m.Namespace, m.ID
	switch m.State {
	case Prepare:
		v, err := tab.Verifier(ctx, ns)
		if err != nil {
			return "", err
		}
		return Freeze, to.Incoming(ctx, token, ns, id, v)
	case Freeze:
		return Copy, from.Freeze(ctx, token, ns, id)
	case Copy:
		return Flip, copyRecords(ctx, token, ns, id, from, to)
	case Flip:
		return Drop, to.Own(ctx, token, ns, id)
	case Drop:
		return Done, from.Drop(ctx, token, ns, id, to.Addrs())
	default:
		return "", fmt.Errorf("unknown state %q", m.State)
	}
}

// copyRecords copies the namespace's records, then raises the target's
// version above every source group's: a token is version<<48 +
// instance, so every token the target grants afterwards exceeds every
// token the source granted. The raise precedes the flip, and the target
// grants nothing of the namespace before the flip (it answers MOVING),
// so no grant of the namespace at the target can precede it.
func copyRecords(ctx context.Context, token uint64, ns string, id uint64, from, to Cluster) error {
	top, err := from.Export(ctx, token, ns, id, func(g, batch int, pairs []byte) error {
		return to.Import(ctx, token, ns, id, g, batch, pairs)
	})
	if err != nil {
		return err
	}
	return to.RaiseVersion(ctx, token, ns, top+1)
}

// Abort undoes a move that has not flipped: it records Aborting, makes
// the target forget the namespace and the source serve it again, and
// records Aborted. An aborting move is finished the same way by Drive.
func Abort(ctx context.Context, m Move, tab Table, clusters Clusters, token uint64) (Move, error) {
	switch {
	case m.State.Ended():
		return m, ErrEnded
	case m.State.Flipped():
		return m, ErrFlipped
	}
	m.State = Aborting
	if err := tab.PutMove(ctx, m, token); err != nil {
		return m, fmt.Errorf("mover: record abort of %q: %w", m.Namespace, err)
	}
	return finishAbort(ctx, m, tab, clusters, token)
}

func finishAbort(ctx context.Context, m Move, tab Table, clusters Clusters, token uint64) (Move, error) {
	from, to, err := endpoints(m, clusters)
	if err != nil {
		return m, err
	}
	if err := to.Forget(ctx, token, m.Namespace, m.ID); err != nil {
		return m, fmt.Errorf("mover: abort of %q at %s: %w", m.Namespace, m.To, err)
	}
	if err := from.Unfreeze(ctx, token, m.Namespace, m.ID); err != nil {
		return m, fmt.Errorf("mover: abort of %q at %s: %w", m.Namespace, m.From, err)
	}
	m.State = Aborted
	if err := tab.PutMove(ctx, m, token); err != nil {
		return m, fmt.Errorf("mover: record aborted %q: %w", m.Namespace, err)
	}
	return m, nil
}

func endpoints(m Move, clusters Clusters) (from, to Cluster, err error) {
	if m.From == m.To {
		return nil, nil, fmt.Errorf("mover: %q moves from %s to itself", m.Namespace, m.From)
	}
	if from, err = clusters(m.From); err != nil {
		return nil, nil, fmt.Errorf("mover: source cluster %q: %w", m.From, err)
	}
	if to, err = clusters(m.To); err != nil {
		return nil, nil, fmt.Errorf("mover: target cluster %q: %w", m.To, err)
	}
	return from, to, nil
}
