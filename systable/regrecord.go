package systable

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
)

// The registry's records, in group 0's keyspace under prefix 'r':
//
//	'r' 'c' name -> cluster:    1, clients, admins (each a list), CA
//	'r' 'n' name -> namespace:  1, epoch, cluster, verifier (namespace record v2)
//	'r' 'm' name -> move:       1, id, from, to, state, step, token
//	'r' 'v'      -> version (uvarint)
//
// Strings and lists are uvarint-length-prefixed. A secret is never
// stored: the node that proposes a namespace derives its verifier. A
// command's record has the same form, but a namespace's has epoch 0 (the
// apply decides it) and may have no verifier (keep the current one); a
// command without a record is a delete.

const (
	regPrefix     = 'r'
	regClusterTag = 'c'
	regNSTag      = 'n'
	regMoveTag    = 'm'
	regRecV1      = 1
	// maxRegAddrs bounds the addresses of one list of a cluster record.
	maxRegAddrs = 64
	// maxRegCA bounds a cluster record's CA certificate (PEM).
	maxRegCA = 64 << 10
	// maxRegAddr bounds one address in a cluster record (as long as a
	// member record's).
	maxRegAddr = 1024
)

var regVersionKey = []byte{regPrefix, 'v'}

// ErrBadRegistryRecord means a registry record does not decode or is not
// one the tables can hold.
var ErrBadRegistryRecord = errors.New("systable: bad registry record")

func regKey(tag byte, name string) []byte {
	return append([]byte{regPrefix, tag}, name...)
}

// IsRegistryKey reports whether k is one of the registry tables' keys.
func IsRegistryKey(k []byte) bool { return len(k) > 0 && k[0] == regPrefix }

// ValidateClusterName checks a cluster name of the registry: a
// namespace's syntax (1 to 64 bytes of letters, digits, '.', '_', '-').
func ValidateClusterName(name string) error {
	if err := wire.ValidateNamespace(name); err != nil {
		return fmt.Errorf("%w: cluster name %q", wire.ErrInvalid, name)
	}
	return nil
}

// ValidateRegistryCluster checks that c can be recorded: a valid name, 1
// to 64 client addresses and at most 64 admin addresses of at most 1 KiB
// each, a CA of at most 64 KiB.
func ValidateRegistryCluster(c adminapi.RegistryCluster) error {
	if err := ValidateClusterName(c.Name); err != nil {
		return err
	}
	if len(c.Client) == 0 || len(c.Client) > maxRegAddrs || len(c.Admin) > maxRegAddrs {
		return fmt.Errorf("%w: cluster %q: 1 to %d client addresses and at most %d admin addresses", wire.ErrInvalid, c.Name, maxRegAddrs, maxRegAddrs)
	}
	for _, a := range append(append([]string(nil), c.Client...), c.Admin...) {
		if a == "" || len(a) > maxRegAddr {
			return fmt.Errorf("%w: cluster %q: address %q", wire.ErrInvalid, c.Name, a)
		}
	}
	if len(c.CA) > maxRegCA {
		return fmt.Errorf("%w: cluster %q: CA over %d bytes", wire.ErrInvalid, c.Name, maxRegCA)
	}
	return nil
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// readStr reads a string of at most limit bytes.
func readStr(r *codec.Reader, limit uint64) string {
	n := r.Uvarint()
	if n > limit {
		r.Fail()
		return ""
	}
	return string(r.Bytes(n))
}

// readStrs reads a list of at most limit addresses.
func readStrs(r *codec.Reader, limit int) []string {
	n := r.Uvarint()
	if n > uint64(limit) {
		r.Fail()
		return nil
	}
	out := make([]string, 0, n)
	for i := uint64(0); i < n && !r.Failed(); i++ {
		out = append(out, readStr(r, maxRegAddr))
	}
	return out
}

// EncodeRegistryCluster returns c's record.
func EncodeRegistryCluster(c adminapi.RegistryCluster) []byte {
	dst := []byte{regRecV1}
	for _, l := range [][]string{c.Client, c.Admin} {
		dst = binary.AppendUvarint(dst, uint64(len(l)))
		for _, a := range l {
			dst = appendStr(dst, a)
		}
	}
	return appendStr(dst, c.CA)
}

func parseRegCluster(name string, b []byte) (adminapi.RegistryCluster, error) {
	r := codec.NewReader(b)
	c := adminapi.RegistryCluster{Name: name}
	if r.Byte() != regRecV1 {
		return c, ErrBadRegistryRecord
	}
	c.Client = readStrs(&r, maxRegAddrs)
	c.Admin = readStrs(&r, maxRegAddrs)
	c.CA = readStr(&r, maxRegCA)
	if len(c.Admin) == 0 {
		c.Admin = nil
	}
	if !r.Done() || ValidateRegistryCluster(c) != nil {
		return c, ErrBadRegistryRecord
	}
	return c, nil
}

// regNS is a namespace's record in memory.
type regNS struct {
	cluster string
	epoch   uint64
	v       scramauth.Verifier
}

// EncodeRegistryNamespace returns a change's record of a namespace
// assigned to cluster, with verifier v (nil: keep the current one).
func EncodeRegistryNamespace(cluster string, v *scramauth.Verifier) []byte {
	n := regNS{cluster: cluster}
	if v != nil {
		n.v = *v
	}
	return appendRegNS(nil, n, v != nil)
}

// appendRegNS encodes a namespace record, with its verifier if
// hasVerifier.
func appendRegNS(dst []byte, n regNS, hasVerifier bool) []byte {
	dst = append(dst, regRecV1)
	dst = binary.AppendUvarint(dst, n.epoch)
	dst = appendStr(dst, n.cluster)
	if !hasVerifier {
		return binary.AppendUvarint(dst, 0)
	}
	v := EncodeNamespaceRecord(n.v)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// parseRegNS decodes a namespace record; ok reports whether it holds a
// verifier.
func parseRegNS(b []byte) (n regNS, ok bool, err error) {
	r := codec.NewReader(b)
	if r.Byte() != regRecV1 {
		return n, false, ErrBadRegistryRecord
	}
	n.epoch = r.Uvarint()
	n.cluster = readStr(&r, wire.MaxNamespaceLen)
	raw := r.Bytes(r.Uvarint())
	if !r.Done() || ValidateClusterName(n.cluster) != nil {
		return n, false, ErrBadRegistryRecord
	}
	if len(raw) == 0 {
		return n, false, nil
	}
	v, hasV, err := ParseNamespaceRecord(raw)
	if err != nil || !hasV {
		return n, false, ErrBadRegistryRecord
	}
	n.v = v
	return n, true, nil
}

// EncodeRegistryMove returns m's record; CheckRegistryMove says whether
// the tables can hold it.
func EncodeRegistryMove(m adminapi.RegistryMove) []byte {
	dst := []byte{regRecV1}
	dst = binary.AppendUvarint(dst, m.ID)
	dst = appendStr(dst, m.From)
	dst = appendStr(dst, m.To)
	dst = append(dst, byte(m.State))
	dst = binary.AppendUvarint(dst, m.Step)
	return binary.AppendUvarint(dst, m.Token)
}

// CheckRegistryMove checks that m can be recorded: an id above 0, a
// known state and two different valid cluster names.
func CheckRegistryMove(m adminapi.RegistryMove) error {
	_, err := parseRegMove(m.Namespace, EncodeRegistryMove(m))
	return err
}

func parseRegMove(ns string, b []byte) (adminapi.RegistryMove, error) {
	r := codec.NewReader(b)
	m := adminapi.RegistryMove{Namespace: ns}
	if r.Byte() != regRecV1 {
		return m, ErrBadRegistryRecord
	}
	m.ID = r.Uvarint()
	m.From = readStr(&r, wire.MaxNamespaceLen)
	m.To = readStr(&r, wire.MaxNamespaceLen)
	m.State = adminapi.MoveState(r.Byte())
	m.Step = r.Uvarint()
	m.Token = r.Uvarint()
	if !r.Done() || !m.State.Valid() || m.ID == 0 ||
		ValidateClusterName(m.From) != nil || ValidateClusterName(m.To) != nil || m.From == m.To {
		return m, ErrBadRegistryRecord
	}
	return m, nil
}

// CheckRegistryPair checks one of the tables' pairs (IsRegistryKey) as a
// backup holds it.
func CheckRegistryPair(k, v []byte) error {
	var t Registry
	t.reset()
	return t.LoadPair(k, v)
}
