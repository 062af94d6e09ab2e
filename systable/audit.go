package systable

import (
	"fmt"
	"slices"
	"sync"

	"github.com/paxlock/paxlock/paxos"
)

// AuditOutcome is the outcome of an audit command as every replica of
// group 0 computes it. It never leaves the node.
type AuditOutcome uint8

// Audit command outcomes.
const (
	// AuditApplied: the record was appended.
	AuditApplied AuditOutcome = iota + 1
	// AuditBadRecord: the command does not decode.
	AuditBadRecord
)

// String returns applied, bad record, or the number of another value.
func (o AuditOutcome) String() string {
	switch o {
	case AuditApplied:
		return "applied"
	case AuditBadRecord:
		return "bad record"
	}
	return fmt.Sprintf("AuditOutcome(%d)", uint8(o))
}

// AuditFilter selects records in a read (zero fields select all).
type AuditFilter struct {
	// Since selects records with Seq above it.
	Since uint64
	// Limit bounds the records returned (0: all selected).
	Limit int
	// Action and Namespace select records with that action, namespace.
	Action, Namespace string
}

// Audit is the audit log as one replica of group 0 holds it: the last
// records appended, oldest first. Every replica appends the same records
// in the same order and trims the same ones (the bound travels in each
// command), so their logs agree. The zero value is empty.
type Audit struct {
	mu   sync.RWMutex
	recs []AuditRecord // by Seq, ascending
	next uint64        // the next record's Seq (0: 1)
}

var _ Table = (*Audit)(nil)

// Apply appends the record of an audit command's data chosen at
// instance, then removes the oldest records past the command's bound.
func (t *Audit) Apply(instance uint64, data []byte, w paxos.Writer) AuditOutcome {
	keep, r, err := DecodeAuditCommand(data)
	if err != nil {
		return AuditBadRecord
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Seq = max(t.next, 1)
	r.Instance = instance
	t.next = r.Seq + 1
	t.recs = append(t.recs, r)
	w.Set(AuditKey(r.Seq), EncodeAuditRecord(r))
	if n := len(t.recs) - keep; n > 0 {
		for _, old := range t.recs[:n] {
			w.Delete(AuditKey(old.Seq))
		}
		t.recs = slices.Delete(t.recs, 0, n)
	}
	return AuditApplied
}

// Claims reports whether k is an audit record's key.
func (t *Audit) Claims(k []byte) bool { return IsAuditKey(k) }

// CheckPair checks one audit record.
func (t *Audit) CheckPair(k, v []byte) error {
	if _, err := auditSeq(k); err != nil {
		return err
	}
	if _, err := DecodeAuditRecord(v); err != nil {
		return fmt.Errorf("audit record %x: %w", k[1:], err)
	}
	return nil
}

// BeginLoad empties the table for a load from a checkpoint and keeps it
// locked until end is called, which orders what was loaded.
func (t *Audit) BeginLoad() (end func()) {
	t.mu.Lock()
	t.recs, t.next = nil, 0
	return func() {
		slices.SortFunc(t.recs, func(a, b AuditRecord) int {
			switch {
			case a.Seq < b.Seq:
				return -1
			case a.Seq > b.Seq:
				return 1
			}
			return 0
		})
		if n := len(t.recs); n > 0 {
			t.next = t.recs[n-1].Seq + 1
		}
		t.mu.Unlock()
	}
}

// LoadPair reads one audit record (IsAuditKey) during a load.
func (t *Audit) LoadPair(k, v []byte) error {
	seq, err := auditSeq(k)
	if err != nil {
		return err
	}
	r, err := DecodeAuditRecord(v)
	if err != nil {
		return fmt.Errorf("audit record %d: %w", seq, err)
	}
	r.Seq = seq
	t.recs = append(t.recs, r)
	return nil
}

// Len returns how many records the table holds.
func (t *Audit) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.recs)
}

// Last returns the highest Seq appended (0: none).
func (t *Audit) Last() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return max(t.next, 1) - 1
}

// Read returns copies of the records f selects, oldest first.
func (t *Audit) Read(f AuditFilter) []AuditRecord {
	t.mu.RLock()
	defer t.mu.RUnlock()
	i, _ := slices.BinarySearchFunc(t.recs, f.Since+1, func(r AuditRecord, seq uint64) int {
		switch {
		case r.Seq < seq:
			return -1
		case r.Seq > seq:
			return 1
		}
		return 0
	})
	out := []AuditRecord{}
	for _, r := range t.recs[i:] {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		if (f.Action == "" || r.Action == f.Action) && (f.Namespace == "" || r.Namespace == f.Namespace) {
			out = append(out, r)
		}
	}
	return out
}
