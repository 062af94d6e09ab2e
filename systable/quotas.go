package systable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
	"github.com/paxlock/paxlock/paxos"
)

// A namespace's quota is a record of its own in group 0's keyspace ('q' +
// name), next to the namespace's record ('n' + name), so that a quota
// change leaves the namespace's SCRAM verifier alone and a namespace
// without a quota costs nothing. A put sets it (all limits 0 removes it);
// removing the namespace removes its quota.

const (
	quotaPrefix = 'q'
	quotaRecV1  = 1
	// MaxQuota bounds each limit of a Quota.
	MaxQuota = math.MaxInt32
)

// ErrBadQuota means a quota record does not decode or holds a limit out
// of range.
var ErrBadQuota = errors.New("systable: bad quota record")

// Quota is a namespace's limits; 0 in a field means unlimited. The
// masters enforce them (package group's quotacheck.go counts each and
// splits the cluster-wide ones over the nodes mastering groups).
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

// EncodeQuota returns q's record.
func EncodeQuota(q Quota) []byte {
	b := []byte{quotaRecV1}
	for _, v := range [...]int64{q.Held, q.Waiters, q.Rate, q.Burst} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

// DecodeQuota decodes a quota record, all of b, and validates it.
func DecodeQuota(b []byte) (Quota, error) {
	if len(b) == 0 || b[0] != quotaRecV1 {
		return Quota{}, ErrBadQuota
	}
	r := codec.NewReader(b[1:])
	var v [4]int64
	for i := range v {
		x := r.Uvarint()
		if x > MaxQuota {
			r.Fail()
		}
		v[i] = int64(x)
	}
	if !r.Done() {
		return Quota{}, ErrBadQuota
	}
	q := Quota{Held: v[0], Waiters: v[1], Rate: v[2], Burst: v[3]}
	if q.Validate() != nil {
		return Quota{}, ErrBadQuota
	}
	return q, nil
}

// QuotaKey is namespace ns's quota key.
func QuotaKey(ns string) []byte { return append([]byte{quotaPrefix}, ns...) }

// IsQuotaKey reports whether k is a quota record's key.
func IsQuotaKey(k []byte) bool { return len(k) > 0 && k[0] == quotaPrefix }

// QuotaOutcome is the outcome of a quota change as every replica of group
// 0 computes it. It never leaves the node: the proposer turns it into an
// error.
type QuotaOutcome uint8

// Quota change outcomes.
const (
	// QuotaApplied: the quota was set or removed.
	QuotaApplied QuotaOutcome = iota + 1
	// QuotaBadRecord: the command's quota does not decode.
	QuotaBadRecord
	// QuotaNoNamespace: the namespace is not in the namespace table.
	QuotaNoNamespace
)

// String returns applied, bad record, no namespace, or the number of
// another value.
func (o QuotaOutcome) String() string {
	switch o {
	case QuotaApplied:
		return "applied"
	case QuotaBadRecord:
		return "bad record"
	case QuotaNoNamespace:
		return "no namespace"
	}
	return fmt.Sprintf("QuotaOutcome(%d)", uint8(o))
}

// Quotas is the namespaces' quotas as one replica of group 0 holds them
// (namespaces without one are absent). The zero value is empty.
type Quotas struct {
	mu   sync.RWMutex
	byNS map[string]Quota
	obs  func() // told of every change (set before the group starts)
}

// SetObserver makes f told of every change of the table (a quota set or
// removed, a namespace's quota dropped, a load that found or left
// quotas), outside the table's lock. Call it before the first apply.
func (t *Quotas) SetObserver(f func()) {
	t.mu.Lock()
	t.obs = f
	t.mu.Unlock()
}

// changed tells the observer of a change; t.mu is not held.
func (t *Quotas) changed() {
	t.mu.RLock()
	obs := t.obs
	t.mu.RUnlock()
	if obs != nil {
		obs()
	}
}

// Apply sets namespace ns's quota to the record rec (a zero quota removes
// it; the observer is told); known reports whether ns is in the namespace
// table, which the caller reads in the same apply.
func (t *Quotas) Apply(ns string, rec []byte, known bool, w paxos.Writer) QuotaOutcome {
	q, err := DecodeQuota(rec)
	if err != nil {
		return QuotaBadRecord
	}
	if !known {
		return QuotaNoNamespace
	}
	t.mu.Lock()
	if q.IsZero() {
		delete(t.byNS, ns)
		w.Delete(QuotaKey(ns))
	} else {
		if t.byNS == nil {
			t.byNS = make(map[string]Quota)
		}
		t.byNS[ns] = q
		w.Set(QuotaKey(ns), EncodeQuota(q))
	}
	t.mu.Unlock()
	t.changed()
	return QuotaApplied
}

// Drop removes namespace ns's quota with the namespace and reports
// whether it had one (the observer is told).
func (t *Quotas) Drop(ns string, w paxos.Writer) bool {
	t.mu.Lock()
	_, had := t.byNS[ns]
	if had {
		delete(t.byNS, ns)
		w.Delete(QuotaKey(ns))
	}
	t.mu.Unlock()
	if had {
		t.changed()
	}
	return had
}

// BeginLoad empties the table for a load from a checkpoint and keeps it
// locked until end is called, which tells the observer if the table held
// quotas before or after the load.
func (t *Quotas) BeginLoad() (end func()) {
	t.mu.Lock()
	had := len(t.byNS) > 0
	t.byNS = make(map[string]Quota)
	return func() {
		changed := had || len(t.byNS) > 0
		t.mu.Unlock()
		if changed {
			t.changed()
		}
	}
}

// LoadPair reads one quota record (IsQuotaKey) during a load.
func (t *Quotas) LoadPair(k, v []byte) error {
	q, err := DecodeQuota(v)
	if err != nil {
		return fmt.Errorf("group: quota of namespace %q: %w", k[1:], err)
	}
	t.byNS[string(k[1:])] = q
	return nil
}

// All returns a copy of the table.
func (t *Quotas) All() map[string]Quota {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.byNS == nil {
		return map[string]Quota{}
	}
	return maps.Clone(t.byNS)
}
