package group

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"

	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/wire"
)

// A namespace's quota is a record of its own in group 0's keyspace ('q' +
// name), next to the namespace's record ('n' + name), so that a quota
// change leaves the namespace's SCRAM verifier alone and a namespace
// without a quota costs nothing. opNamespaceQuota sets it (all limits 0
// removes it); removing the namespace removes its quota.

const (
	quotaPrefix = 'q'
	quotaRecV1  = 1
	// MaxQuota bounds each limit of a Quota.
	MaxQuota = math.MaxInt32
)

// Quota is a namespace's limits; 0 in a field means unlimited. The
// masters enforce them: see quotacheck.go for how each is counted and
// how the cluster-wide ones split over the nodes mastering groups.
type Quota struct {
	// Held bounds the keys of the namespace held at once, cluster-wide
	// (a read-held key with several readers, or a semaphore with several
	// permit holders, is one key).
	Held int64
	// Waiters bounds the namespace's blocked acquires queued at once,
	// cluster-wide.
	Waiters int64
	// Rate bounds the namespace's new requests per second (acquires,
	// state queries, watches, multi-acquires), cluster-wide.
	Rate int64
	// Burst is how many requests above Rate may pass at once (0: Rate,
	// one second's worth). Without a Rate it means nothing.
	Burst int64
}

// IsZero reports whether q limits nothing.
func (q Quota) IsZero() bool { return q == Quota{} }

// Validate checks that every limit is between 0 and MaxQuota and that a
// Burst comes with a Rate.
func (q Quota) Validate() error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"held", q.Held}, {"waiters", q.Waiters}, {"rate", q.Rate}, {"burst", q.Burst}} {
		if f.v < 0 || f.v > MaxQuota {
			return fmt.Errorf("%w: quota %s %d: want 0 (unlimited) to %d", wire.ErrInvalid, f.name, f.v, MaxQuota)
		}
	}
	if q.Burst > 0 && q.Rate == 0 {
		return fmt.Errorf("%w: quota burst without a rate", wire.ErrInvalid)
	}
	return nil
}

func encodeQuota(q Quota) []byte {
	b := []byte{quotaRecV1}
	for _, v := range [...]int64{q.Held, q.Waiters, q.Rate, q.Burst} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

func decodeQuota(b []byte) (Quota, error) {
	if len(b) == 0 || b[0] != quotaRecV1 {
		return Quota{}, errBadCommand
	}
	r := reader{b: b[1:]}
	var v [4]int64
	for i := range v {
		x := r.uvarint()
		if x > MaxQuota {
			r.err = true
		}
		v[i] = int64(x)
	}
	if r.err || len(r.b) != 0 {
		return Quota{}, errBadCommand
	}
	q := Quota{Held: v[0], Waiters: v[1], Rate: v[2], Burst: v[3]}
	if q.Validate() != nil {
		return Quota{}, errBadCommand
	}
	return q, nil
}

func quotaKey(ns string) []byte { return append([]byte{quotaPrefix}, ns...) }

// quotaOutcome is the outcome of a quota-table change as every replica
// of group 0 computes it: the applied command's result itself, which
// PutQuota turns into an error.
type quotaOutcome uint8

// Quota-table change outcomes.
const (
	// quotaApplied: the quota was set or removed.
	quotaApplied quotaOutcome = iota + 1
	// quotaBadRecord: the command's quota does not decode.
	quotaBadRecord
	// quotaNoNamespace: the namespace is not in the namespace table
	// (ErrUnknownNamespace).
	quotaNoNamespace
)

// applyQuota applies opNamespaceQuota: key = namespace, data = the
// encoded Quota (a zero one removes the record). A namespace that does
// not exist is refused (quotaNoNamespace).
func (sm *StateMachine) applyQuota(c *command, w paxos.Writer) quotaOutcome {
	q, err := decodeQuota(c.data)
	if err != nil {
		return quotaBadRecord
	}
	sm.nsMu.Lock()
	if _, ok := sm.namespaces[c.key]; !ok {
		sm.nsMu.Unlock()
		return quotaNoNamespace
	}
	if q.IsZero() {
		delete(sm.quotas, c.key)
		w.Delete(quotaKey(c.key))
	} else {
		sm.quotas[c.key] = q
		w.Set(quotaKey(c.key), encodeQuota(q))
	}
	sm.nsMu.Unlock()
	sm.quotasChanged()
	return quotaApplied
}

// dropQuota removes namespace ns's quota with the namespace; sm.nsMu is
// held.
func (sm *StateMachine) dropQuota(ns string, w paxos.Writer) {
	if _, ok := sm.quotas[ns]; ok {
		delete(sm.quotas, ns)
		w.Delete(quotaKey(ns))
	}
}

// quotasChanged tells the service that the quota table changed (applied
// or loaded).
func (sm *StateMachine) quotasChanged() {
	if sm.quotaObs != nil {
		sm.quotaObs()
	}
}

func (sm *StateMachine) loadQuota(k, v []byte) error {
	q, err := decodeQuota(v)
	if err != nil {
		return fmt.Errorf("group: quota of namespace %q: %w", k[1:], err)
	}
	sm.quotas[string(k[1:])] = q
	return nil
}

// Quotas returns the namespaces' quotas as this replica of the namespace
// table knows them (namespaces without one are absent).
func (s *Service) Quotas() map[string]Quota {
	sm := s.groups[NamespaceGroup].sm
	sm.nsMu.RLock()
	defer sm.nsMu.RUnlock()
	return maps.Clone(sm.quotas)
}

// PutQuota sets namespace ns's quota (a zero Quota removes it). It must
// run on the master of group 0 (else ErrNotSystemMaster); an unknown
// namespace is ErrUnknownNamespace. The quota is enforced on this node
// once PutQuota returns, and on the others once they apply it.
func (s *Service) PutQuota(ctx context.Context, ns string, q Quota) error {
	if err := wire.ValidateNamespace(ns); err != nil {
		return err
	}
	if err := q.Validate(); err != nil {
		return err
	}
	res, err := s.proposeTable(ctx, &command{op: opNamespaceQuota, key: ns, data: encodeQuota(q)}, "quota change")
	if err != nil {
		return err
	}
	switch o, _ := res.(quotaOutcome); o {
	case quotaApplied:
	case quotaNoNamespace:
		return ErrUnknownNamespace
	default:
		return fmt.Errorf("group: quota change: %v", res)
	}
	s.quota.refresh(s)
	return nil
}
