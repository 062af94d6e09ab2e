package pebblestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/paxlock/paxlock/paxos"
)

// Storage layout. Every key starts with the group id (u32, big-endian) and a
// kind byte, so that one group's keys are contiguous, byte order equals
// numeric order, and a range of a group's keys can be dropped with one
// DeleteRange:
//
//	[g][kindHardState]             -> hard state (version, promised, committed)
//	[g][kindMeta][name]            -> opaque bytes
//	[g][kindLog][instance u64]     -> AppendEntry encoding
//	[g][kindApplied]               -> u64
//	[g][kindLogStart]              -> u64
//	[g][kindRestoring]             -> present while a snapshot install is unfinished
//	[g][kindSM][key]               -> the state machine's own keys and values
const (
	kindHardState byte = 1
	kindMeta      byte = 2
	kindLog       byte = 3
	kindApplied   byte = 4
	kindLogStart  byte = 5
	kindRestoring byte = 6
	kindSM        byte = 7

	// prefixLen is the length of [g][kind].
	prefixLen = 5
)

func appendPrefix(dst []byte, g paxos.GroupID, kind byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(g))
	return append(dst, kind)
}

func appendLogKey(dst []byte, g paxos.GroupID, inst uint64) []byte {
	return binary.BigEndian.AppendUint64(appendPrefix(dst, g, kindLog), inst)
}

// kindEnd returns the first key after every key of (g, kind).
func kindEnd(g paxos.GroupID, kind byte) []byte {
	return appendPrefix(nil, g, kind+1)
}

func hardKey(g paxos.GroupID) []byte      { return appendPrefix(nil, g, kindHardState) }
func appliedKey(g paxos.GroupID) []byte   { return appendPrefix(nil, g, kindApplied) }
func logStartKey(g paxos.GroupID) []byte  { return appendPrefix(nil, g, kindLogStart) }
func restoringKey(g paxos.GroupID) []byte { return appendPrefix(nil, g, kindRestoring) }

func appendSMKey(dst []byte, g paxos.GroupID, key []byte) []byte {
	return append(appendPrefix(dst, g, kindSM), key...)
}

// prefixEnd returns the first key after every key that starts with p, or
// nil if there is none (p is empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// ---- values ----

func decodeU64(b []byte, what string) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%w: %s has %d bytes, want 8", paxos.ErrCorrupt, what, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// pebbleReader is what Store reads through: the DB or a pebble.Snapshot.
type pebbleReader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// storeGet calls fn with the value of key if it exists. The value is valid only
// during fn.
func storeGet(r pebbleReader, key []byte, fn func(v []byte) error) (bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	err = fn(v)
	if cerr := closer.Close(); err == nil {
		err = cerr
	}
	return true, err
}

func storeGetU64(r pebbleReader, key []byte, what string, def uint64) (uint64, error) {
	val := def
	_, err := storeGet(r, key, func(v []byte) error {
		var err error
		val, err = decodeU64(v, what)
		return err
	})
	return val, err
}
