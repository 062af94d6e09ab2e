package systable

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
)

// A namespace's record holds what authenticates its clients; secrets
// themselves are never stored or logged.
//
// A record of version 2 (written since SCRAM) holds the namespace's SCRAM
// verifier (scramauth.Verifier: iteration count, salt, StoredKey,
// ServerKey), derived from the secret on the node that proposes the
// change. A record of version 1 (written before) holds a salt and
// SHA-256(salt || secret), from which no SCRAM verifier can be derived:
// it still loads (from the log and from snapshots; nothing is lost), and a
// namespace whose secret is also in the node's configuration gets its
// verifier derived from that secret, with the record's salt, on every
// node alike (see Namespaces.Verifier). Another version-1 namespace
// cannot authenticate until its secret is set again.

const (
	nsSaltLen  = 16
	nsRecV1Len = 1 + nsSaltLen + sha256.Size
	nsRecV1    = 1
	nsRecV2    = 2
	// v2: version, iterations (u32), salt length (u8), salt, StoredKey,
	// ServerKey.
	nsRecV2Fixed = 1 + 4 + 1 + 2*scramauth.KeyLen
)

// ErrBadNamespaceRecord means a namespace record, or a list of them, does
// not decode, or holds a verifier that does not validate.
var ErrBadNamespaceRecord = errors.New("systable: bad namespace record")

// nsRec is one namespace's record, as replicated.
type nsRec struct {
	raw []byte             // the record as stored
	v   scramauth.Verifier // version 2's verifier; for version 1, derived from the configured secret once (see Namespaces.Verifier)
	ok  bool               // v is set
}

func hashSecret(salt []byte, secret string) [sha256.Size]byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(secret))
	var out [sha256.Size]byte
	copy(out[:], h.Sum(nil))
	return out
}

// NewNamespaceRecord derives the version-2 record of secret, with a fresh
// salt.
func NewNamespaceRecord(secret string) ([]byte, error) {
	v, err := scramauth.NewVerifier(secret)
	if err != nil {
		return nil, fmt.Errorf("group: namespace verifier: %w", err)
	}
	return EncodeNamespaceRecord(v), nil
}

// EncodeNamespaceRecord returns the version-2 record of verifier v.
func EncodeNamespaceRecord(v scramauth.Verifier) []byte {
	b := make([]byte, 0, nsRecV2Fixed+len(v.Salt))
	b = append(b, nsRecV2)
	b = binary.BigEndian.AppendUint32(b, uint32(v.Iters))
	b = append(b, byte(len(v.Salt)))
	b = append(b, v.Salt...)
	b = append(b, v.StoredKey...)
	return append(b, v.ServerKey...)
}

// ParseNamespaceRecord checks a record of either version, all of b, and
// returns its verifier; ok is false for a version-1 record, which holds
// none.
func ParseNamespaceRecord(b []byte) (v scramauth.Verifier, ok bool, err error) {
	r, err := parseNSRec(b)
	return r.v, r.ok, err
}

// parseNSRec checks a record of either version; the record keeps a copy
// of b.
func parseNSRec(b []byte) (nsRec, error) {
	r := nsRec{raw: append([]byte(nil), b...)}
	switch {
	case len(b) == nsRecV1Len && b[0] == nsRecV1:
		return r, nil
	case len(b) >= nsRecV2Fixed && b[0] == nsRecV2 && len(b) == nsRecV2Fixed+int(b[5]):
		n := int(b[5])
		v := scramauth.Verifier{
			Iters:     int(binary.BigEndian.Uint32(b[1:5])),
			Salt:      r.raw[6 : 6+n],
			StoredKey: r.raw[6+n : 6+n+scramauth.KeyLen],
			ServerKey: r.raw[6+n+scramauth.KeyLen:],
		}
		if v.Validate() != nil {
			return nsRec{}, ErrBadNamespaceRecord
		}
		r.v, r.ok = v, true
		return r, nil
	}
	return nsRec{}, ErrBadNamespaceRecord
}

// legacyVerifier derives the verifier of a version-1 record from secret,
// if secret is the record's: with the record's salt and Iterations, so
// that every node derives the same one.
func (r *nsRec) legacyVerifier(secret string) (scramauth.Verifier, bool) {
	if len(r.raw) != nsRecV1Len || r.raw[0] != nsRecV1 {
		return scramauth.Verifier{}, false
	}
	salt := r.raw[1 : 1+nsSaltLen]
	sum := hashSecret(salt, secret)
	if subtle.ConstantTimeCompare(sum[:], r.raw[1+nsSaltLen:]) != 1 {
		return scramauth.Verifier{}, false
	}
	v, err := scramauth.Derive(secret, salt, scramauth.Iterations)
	return v, err == nil
}

// SeedVerifier derives the verifier of a configured namespace: with a
// salt derived from the cluster and namespace names, so that every node
// derives the same one (the table's install of the configured namespaces
// records it; sessions authenticated before then stay valid after). A
// namespace created or changed at run time gets a random salt.
func SeedVerifier(cluster, ns, secret string) (scramauth.Verifier, error) {
	h := sha256.New()
	h.Write([]byte("paxlock namespace seed salt\x00"))
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write([]byte(ns))
	return scramauth.Derive(secret, h.Sum(nil)[:nsSaltLen], scramauth.Iterations)
}

// EncodeNamespaceSeed returns the list of records that installs the
// configured namespaces seed (Namespaces.ApplyInit's), sorted by name:
// name, record, name, record..., each uvarint-length-prefixed. A bad name
// or verifier is an error.
func EncodeNamespaceSeed(seed map[string]scramauth.Verifier) ([]byte, error) {
	names := make([]string, 0, len(seed))
	for name := range seed {
		if err := wire.ValidateNamespace(name); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	var data []byte
	for _, name := range names {
		v := seed[name]
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("group: namespace %q: %w", name, err)
		}
		data = codec.AppendPair(data, []byte(name), EncodeNamespaceRecord(v))
	}
	return data, nil
}

// decodeNSList decodes a list of records as EncodeNamespaceSeed writes
// it. Each record is length-prefixed (uvarint) since version 2; lists
// written before hold version-1 records of fixed length without a prefix,
// told apart by the byte that follows the name (a version-1 record starts
// with 1, a prefix of a version-2 record is over 1).
func decodeNSList(b []byte) (map[string]nsRec, error) {
	out := map[string]nsRec{}
	r := codec.NewReader(b)
	for r.Len() > 0 && !r.Failed() {
		name := string(r.Bytes(r.Uvarint()))
		if r.Failed() || r.Len() == 0 || wire.ValidateNamespace(name) != nil {
			return nil, ErrBadNamespaceRecord
		}
		var raw []byte
		if r.Rest()[0] == nsRecV1 {
			raw = r.Bytes(nsRecV1Len)
		} else {
			raw = r.Bytes(r.Uvarint())
		}
		if r.Failed() {
			return nil, ErrBadNamespaceRecord
		}
		rec, err := parseNSRec(raw)
		if err != nil {
			return nil, err
		}
		out[name] = rec
	}
	if r.Failed() {
		return nil, ErrBadNamespaceRecord
	}
	return out, nil
}
