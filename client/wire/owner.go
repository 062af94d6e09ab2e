package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// Client keys bind owners to sessions. A client picks a random ClientKey
// and sends it in its Hello; its client id, the Client part of every Owner
// it uses, is ClientIDOf(key), and a server accepts a Hello only
// when its ClientID is the one its key derives. A server serves a request
// whose Owner names another client id with AUTH_FAILED. So a connection acts
// only as the owners of the key it proved, and a client id learned from a
// State answer or a WatchEvent, where holders stay visible, does not let
// anyone act as that holder: that needs the key, which no reply carries.
// The key is a bearer credential like the namespace's secret and travels
// the same way (in the clear today: use a trusted network or TLS).

const (
	// MinClientKeyLen and MaxClientKeyLen bound Hello.ClientKey, in bytes.
	MinClientKeyLen = 16
	MaxClientKeyLen = 64
)

// clientIDDomain separates ClientIDOf's hashes from any other use of
// SHA-256 over the same bytes.
const clientIDDomain = "paxlock client id v1\x00"

// ClientIDOf derives the client id of a client key: the first eight bytes
// of SHA-256 over a domain string and key, read as a big-endian integer (1
// if they are all zero). Finding another key with the same id is a 64-bit
// preimage search. The id is the same in every namespace; owners are
// only ever compared within one.
func ClientIDOf(key string) uint64 {
	h := sha256.New()
	h.Write([]byte(clientIDDomain))
	h.Write([]byte(key))
	var sum [sha256.Size]byte
	id := binary.BigEndian.Uint64(h.Sum(sum[:0]))
	if id == 0 {
		id = 1
	}
	return id
}

// validateClientKey checks a Hello's key and that it derives the Hello's
// client id.
func validateClientKey(key string, id uint64) error {
	if len(key) < MinClientKeyLen || len(key) > MaxClientKeyLen {
		return fmt.Errorf("%w: client key of %d bytes, want %d to %d", ErrInvalidField, len(key), MinClientKeyLen, MaxClientKeyLen)
	}
	if ClientIDOf(key) != id {
		return fmt.Errorf("%w: client id is not the one its key derives", ErrInvalidField)
	}
	return nil
}
