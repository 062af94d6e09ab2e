package pebblestore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
	"github.com/paxlock/paxlock/paxos"
)

// LoadGroup reads group g's state, consistently (from one Pebble snapshot).
func (s *Store) LoadGroup(g paxos.GroupID) (paxos.GroupState, error) {
	snap := s.db.NewSnapshot()
	defer func() { _ = snap.Close() }() // a read-only view: closing it fails only when closed twice
	var st paxos.GroupState
	var err error
	if _, err = storeGet(snap, hardKey(g), func(v []byte) error {
		st.Hard, err = paxos.DecodeHardState(v)
		return err
	}); err != nil {
		return paxos.GroupState{}, fmt.Errorf("paxos: load group %d hard state: %w", g, err)
	}
	if st.LogStart, err = storeGetU64(snap, logStartKey(g), "log start", 1); err != nil {
		return paxos.GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	if st.Applied, err = storeGetU64(snap, appliedKey(g), "applied", 0); err != nil {
		return paxos.GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	if st.Restoring, err = storeGet(snap, restoringKey(g), func([]byte) error { return nil }); err != nil {
		return paxos.GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	it, err := snap.NewIter(&pebble.IterOptions{
		LowerBound: appendPrefix(nil, g, kindLog),
		UpperBound: kindEnd(g, kindLog),
	})
	if err != nil {
		return paxos.GroupState{}, fmt.Errorf("paxos: load group %d: %w", g, err)
	}
	if it.Last() {
		k := it.Key()
		if len(k) != prefixLen+8 {
			err = fmt.Errorf("%w: log key of %d bytes", paxos.ErrCorrupt, len(k))
		} else {
			st.Last = binary.BigEndian.Uint64(k[prefixLen:])
		}
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return paxos.GroupState{}, fmt.Errorf("paxos: load group %d last entry: %w", g, err)
	}
	return st, nil
}

// decodeStoredEntry decodes a log value and checks it is for inst.
func decodeStoredEntry(v []byte, inst uint64) (paxos.Entry, error) {
	e, err := paxos.DecodeEntry(v)
	if err != nil {
		return paxos.Entry{}, err
	}
	if e.Instance != inst {
		return paxos.Entry{}, fmt.Errorf("%w: entry under instance %d says %d", paxos.ErrCorrupt, inst, e.Instance)
	}
	return e, nil
}

// Entries returns group g's consecutive stored entries from `from` up to `to`
// inclusive: it stops at the first missing instance, and after the entry
// that brings the total encoded size to maxBytes or more (so it returns at
// least one entry if `from` is stored). maxBytes <= 0 means no limit. The
// result is nil if `from` is not stored.
func (s *Store) Entries(g paxos.GroupID, from, to uint64, maxBytes int) ([]paxos.Entry, error) {
	if to < from {
		return nil, nil
	}
	upper := kindEnd(g, kindLog)
	if to < math.MaxUint64 {
		upper = appendLogKey(nil, g, to+1)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: appendLogKey(nil, g, from), UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries: %w", g, err)
	}
	var out []paxos.Entry
	total := 0
	next := from
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != prefixLen+8 {
			err = fmt.Errorf("%w: log key of %d bytes", paxos.ErrCorrupt, len(k))
			break
		}
		if binary.BigEndian.Uint64(k[prefixLen:]) != next {
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		var e paxos.Entry
		if e, err = decodeStoredEntry(v, next); err != nil {
			break
		}
		if out == nil {
			out = make([]paxos.Entry, 0, min(to-from+1, 64))
		}
		out = append(out, e)
		total += len(v)
		if (maxBytes > 0 && total >= maxBytes) || next == to {
			break
		}
		next++
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries from %d: %w", g, from, err)
	}
	return out, nil
}

// EntriesFrom returns every stored entry of group g at or above `from`, in
// instance order, gaps included (an acceptor may hold instances it accepted
// out of order). It is meant for loading a group at start, e.g. every entry
// above Applied.
func (s *Store) EntriesFrom(g paxos.GroupID, from uint64) ([]paxos.Entry, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: appendLogKey(nil, g, from), UpperBound: kindEnd(g, kindLog)})
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries: %w", g, err)
	}
	var out []paxos.Entry
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) != prefixLen+8 {
			err = fmt.Errorf("%w: log key of %d bytes", paxos.ErrCorrupt, len(k))
			break
		}
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		var e paxos.Entry
		if e, err = decodeStoredEntry(v, binary.BigEndian.Uint64(k[prefixLen:])); err != nil {
			break
		}
		out = append(out, e)
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("paxos: group %d entries from %d: %w", g, from, err)
	}
	return out, nil
}

// ---- state-machine access ----

// SMReader returns a Reader of group g's state-machine keyspace. It reads
// the latest committed state (including commits whose fsync is still under
// way); it is safe for concurrent use.
func (s *Store) SMReader(g paxos.GroupID) paxos.Reader { return smReader{r: s.db, g: g} }

type smReader struct {
	r pebbleReader
	g paxos.GroupID
}

func (r smReader) Get(key []byte) ([]byte, bool, error) {
	var buf [64]byte
	var out []byte
	ok, err := storeGet(r.r, appendSMKey(buf[:0], r.g, key), func(v []byte) error {
		out = bytes.Clone(v)
		if out == nil {
			out = []byte{}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("paxos: group %d state machine get: %w", r.g, err)
	}
	return out, ok, nil
}

func (r smReader) Scan(prefix []byte, fn func(key, value []byte) error) error {
	lower := appendSMKey(nil, r.g, prefix)
	upper := prefixEnd(lower)
	if len(prefix) == 0 || len(upper) <= prefixLen {
		upper = kindEnd(r.g, kindSM)
	}
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("paxos: group %d state machine scan: %w", r.g, err)
	}
	var ferr error
	for ok := it.First(); ok; ok = it.Next() {
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		if ferr = fn(it.Key()[prefixLen:], v); ferr != nil {
			break
		}
	}
	if err == nil {
		err = it.Error()
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("paxos: group %d state machine scan: %w", r.g, err)
	}
	return ferr
}
