package systable

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// The namespace table is replicated through lock group 0, so every node
// agrees on it: a record per namespace in group 0's keyspace ('n' +
// name, nsrecord.go's encoding) and a mark that the configured namespaces
// were installed. Every change is written through on apply.

const nsPrefix = 'n'

var nsInitKey = []byte("mnsinit")

// ErrUnknownNamespace means the namespace does not exist.
var ErrUnknownNamespace = errors.New("group: unknown namespace")

// IsNamespaceKey reports whether k is one of the namespace table's keys
// (a namespace's record or the table's initialised mark).
func IsNamespaceKey(k []byte) bool {
	return (len(k) > 0 && k[0] == nsPrefix) || string(k) == string(nsInitKey)
}

func namespaceKey(name string) []byte { return append([]byte{nsPrefix}, name...) }

// CheckNamespacePair checks one of the table's pairs (IsNamespaceKey) as
// a backup holds it.
func CheckNamespacePair(k, v []byte) error {
	if string(k) == string(nsInitKey) {
		return nil
	}
	_, err := parseNSRec(v)
	return err
}

// NamespaceOutcome is the outcome of a namespace-table change as every
// replica of group 0 computes it. It never leaves the node: the proposer
// turns it into an error (Err).
type NamespaceOutcome uint8

// Namespace-table change outcomes.
const (
	// NamespaceApplied: the change was applied, or was a no-op (the
	// table initialised already).
	NamespaceApplied NamespaceOutcome = iota + 1
	// NamespaceBadRecord: the command's name or record is malformed.
	NamespaceBadRecord
	// NamespaceUnknown: the namespace to delete is not in the table
	// (ErrUnknownNamespace).
	NamespaceUnknown
)

// String returns applied, bad record, unknown, or the number of another
// value.
func (o NamespaceOutcome) String() string {
	switch o {
	case NamespaceApplied:
		return "applied"
	case NamespaceBadRecord:
		return "bad record"
	case NamespaceUnknown:
		return "unknown"
	}
	return fmt.Sprintf("NamespaceOutcome(%d)", uint8(o))
}

// Err is the proposer's error for o: nil for NamespaceApplied,
// ErrUnknownNamespace, or one naming o.
func (o NamespaceOutcome) Err() error {
	switch o {
	case NamespaceApplied:
		return nil
	case NamespaceUnknown:
		return ErrUnknownNamespace
	}
	return fmt.Errorf("group: namespace change: %s", o)
}

// Namespaces is the namespace table as one replica of group 0 holds it:
// each namespace's record, whether the configured namespaces were
// installed, and a generation that counts the changes. The zero value is
// an empty table, never initialised.
type Namespaces struct {
	mu     sync.RWMutex
	byName map[string]nsRec
	init   bool   // the configured namespaces were installed
	gen    uint64 // counts changes of the table; see Generation
}

// begin marks the table initialised and counts a change, as every one of
// its ops does, even one it refuses; t.mu is held.
func (t *Namespaces) begin(w paxos.Writer) (wasInit bool) {
	wasInit = t.init
	t.init = true
	t.gen++
	if !wasInit {
		w.Set(nsInitKey, []byte{1})
	}
	if t.byName == nil {
		t.byName = make(map[string]nsRec)
	}
	return wasInit
}

// ApplyPut creates namespace name, or replaces its record, with rec
// (either version).
func (t *Namespaces) ApplyPut(name string, rec []byte, w paxos.Writer) NamespaceOutcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begin(w)
	r, err := parseNSRec(rec)
	if err != nil || wire.ValidateNamespace(name) != nil {
		return NamespaceBadRecord
	}
	t.byName[name] = r
	w.Set(namespaceKey(name), r.raw)
	return NamespaceApplied
}

// ApplyDelete removes namespace name (its quota is the caller's, in the
// same apply).
func (t *Namespaces) ApplyDelete(name string, w paxos.Writer) NamespaceOutcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begin(w)
	if _, ok := t.byName[name]; !ok {
		return NamespaceUnknown
	}
	delete(t.byName, name)
	w.Delete(namespaceKey(name))
	return NamespaceApplied
}

// ApplyInit installs the list of records list (EncodeNamespaceSeed's)
// into a table never initialised, so that a namespace an operator removed
// does not come back from a configuration file; into one initialised
// already it is a no-op.
func (t *Namespaces) ApplyInit(list []byte, w paxos.Writer) NamespaceOutcome {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.begin(w) {
		return NamespaceApplied
	}
	recs, err := decodeNSList(list)
	if err != nil {
		return NamespaceBadRecord
	}
	for name, r := range recs {
		t.byName[name] = r
		w.Set(namespaceKey(name), r.raw)
	}
	return NamespaceApplied
}

// BeginLoad empties the table for a load from a checkpoint and keeps it
// locked until end is called.
func (t *Namespaces) BeginLoad() (end func()) {
	t.mu.Lock()
	t.byName = make(map[string]nsRec)
	t.init = false
	t.gen++
	return t.mu.Unlock
}

// LoadPair reads one of the table's pairs (IsNamespaceKey) during a load.
func (t *Namespaces) LoadPair(k, v []byte) error {
	if string(k) == string(nsInitKey) {
		t.init = true
		return nil
	}
	r, err := parseNSRec(v)
	if err != nil {
		return fmt.Errorf("group: namespace %q: %w", k[1:], err)
	}
	t.byName[string(k[1:])] = r
	return nil
}

// Has reports whether namespace name exists.
func (t *Namespaces) Has(name string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	_, ok := t.byName[name]
	return ok
}

// Names lists the namespaces, sorted.
func (t *Namespaces) Names() []string {
	t.mu.RLock()
	out := make([]string, 0, len(t.byName))
	for n := range t.byName {
		out = append(out, n)
	}
	t.mu.RUnlock()
	sort.Strings(out)
	return out
}

// Record returns a copy of namespace name's record, false if it does not
// exist: what a namespace's move installs on its target.
func (t *Namespaces) Record(name string) ([]byte, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.byName[name]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), r.raw...), true
}

// Generation counts the changes this replica has applied to the table
// (a namespace put, deleted or installed, a load).
func (t *Namespaces) Generation() uint64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.gen
}

// Initialised reports whether the table was ever written.
func (t *Namespaces) Initialised() bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.init
}

// Verifier returns namespace ns's SCRAM verifier, false if the namespace
// does not exist or cannot authenticate (a version-1 record whose secret
// seedSecrets does not hold). Until the table has been initialised, seed
// holds the configured namespaces' verifiers; seedSecrets are the
// configured secrets, which give a version-1 record its verifier (kept
// with the record once derived).
func (t *Namespaces) Verifier(ns string, seed map[string]scramauth.Verifier, seedSecrets map[string]string) (scramauth.Verifier, bool) {
	t.mu.RLock()
	r, ok := t.byName[ns]
	init := t.init
	t.mu.RUnlock()
	if !init {
		v, ok := seed[ns]
		return v, ok
	}
	if !ok {
		return scramauth.Verifier{}, false
	}
	if r.ok {
		return r.v, true
	}
	secret, ok := seedSecrets[ns]
	if !ok {
		return scramauth.Verifier{}, false
	}
	v, ok := r.legacyVerifier(secret)
	if !ok {
		return scramauth.Verifier{}, false
	}
	// Keep it, unless the record changed meanwhile.
	t.mu.Lock()
	if cur, still := t.byName[ns]; still && bytes.Equal(cur.raw, r.raw) {
		cur.v, cur.ok = v, true
		t.byName[ns] = cur
	}
	t.mu.Unlock()
	return v, true
}
