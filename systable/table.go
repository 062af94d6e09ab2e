package systable

import "fmt"

// Table is what a checkpoint load and a backup need of a system table:
// the keys it claims in group 0's keyspace (no two tables claim one key)
// and the reading of its pairs. Package group's Load offers every key to
// each table in turn and reads the keys none claims as the lock table's.
type Table interface {
	// Claims reports whether k is one of the table's keys.
	Claims(k []byte) bool
	// BeginLoad empties the table for a load and keeps it locked until
	// end is called, which tells the table's observer, if any.
	BeginLoad() (end func())
	// LoadPair reads one of the table's pairs (Claims) during a load.
	LoadPair(k, v []byte) error
	// CheckPair checks one of the table's pairs as a backup holds it,
	// leaving the table alone.
	CheckPair(k, v []byte) error
}

var (
	_ Table = (*Namespaces)(nil)
	_ Table = (*Quotas)(nil)
	_ Table = (*Members)(nil)
	_ Table = (*Registry)(nil)
)

// Claims reports whether k is one of the namespace table's keys.
func (t *Namespaces) Claims(k []byte) bool { return IsNamespaceKey(k) }

// CheckPair checks a namespace record (CheckNamespacePair).
func (t *Namespaces) CheckPair(k, v []byte) error {
	if err := CheckNamespacePair(k, v); err != nil {
		return fmt.Errorf("namespace %q: %w", k[1:], err)
	}
	return nil
}

// Claims reports whether k is a quota record's key.
func (t *Quotas) Claims(k []byte) bool { return IsQuotaKey(k) }

// CheckPair checks a quota record.
func (t *Quotas) CheckPair(k, v []byte) error {
	if _, err := DecodeQuota(v); err != nil {
		return fmt.Errorf("quota of namespace %q: %w", k[1:], err)
	}
	return nil
}

// Claims reports whether k is one of the member list's keys.
func (t *Members) Claims(k []byte) bool { return IsMemberKey(k) }

// CheckPair checks one of the member list's pairs.
func (t *Members) CheckPair(k, v []byte) error {
	var scratch Members
	scratch.byID = make(map[uint32]Member)
	return scratch.LoadPair(k, v)
}

// Claims reports whether k is one of the registry tables' keys.
func (t *Registry) Claims(k []byte) bool { return IsRegistryKey(k) }

// CheckPair checks one of the registry tables' pairs (CheckRegistryPair).
func (t *Registry) CheckPair(k, v []byte) error {
	if err := CheckRegistryPair(k, v); err != nil {
		return fmt.Errorf("registry record %q: %w", k, err)
	}
	return nil
}
