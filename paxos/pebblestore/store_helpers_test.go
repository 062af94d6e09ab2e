package pebblestore

import (
	"bytes"
	"fmt"
	"github.com/paxlock/paxlock/paxos"
)

// Store reads and writes that only tests use: the Host reads the log
// through LoadGroup, EntriesFrom and Entries, and writes no metadata.

// Entry returns group g's stored entry for instance inst, if any.
func (s *Store) Entry(g paxos.GroupID, inst uint64) (paxos.Entry, bool, error) {
	var key [prefixLen + 8]byte
	var e paxos.Entry
	var err error
	ok, gerr := storeGet(s.db, appendLogKey(key[:0], g, inst), func(v []byte) error {
		e, err = decodeStoredEntry(v, inst)
		return err
	})
	if gerr != nil {
		return paxos.Entry{}, false, fmt.Errorf("paxos: group %d entry %d: %w", g, inst, gerr)
	}
	return e, ok, nil
}

// Meta returns the metadata value `key` of group g (a copy), if set.
func (s *Store) Meta(g paxos.GroupID, key string) ([]byte, bool, error) {
	var out []byte
	ok, err := storeGet(s.db, appendMetaKey(nil, g, key), func(v []byte) error {
		out = bytes.Clone(v)
		if out == nil {
			out = []byte{}
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("paxos: group %d meta %q: %w", g, key, err)
	}
	return out, ok, nil
}

// setMeta sets the metadata value `key` of group g in b, a Store's batch.
func setMeta(b paxos.Batch, g paxos.GroupID, key string, val []byte) {
	sb := b.(*storeBatch)
	sb.key = appendMetaKey(sb.key[:0], g, key)
	sb.set(sb.key, val)
}

func appendMetaKey(dst []byte, g paxos.GroupID, name string) []byte {
	return append(appendPrefix(dst, g, kindMeta), name...)
}
