package wire

import (
	"errors"
	"fmt"
)

// DefaultGroups is the number of lock groups a cluster runs unless it is
// configured otherwise. A key's group is GroupOf(KeyHash(ns, key), groups).
const DefaultGroups = 15

// Limits on names and weights. TTL and wait bounds are server configuration,
// not protocol, and are not checked here.
const (
	// MaxKeyLen is the longest lock key, in bytes.
	MaxKeyLen = 512
	// MaxNamespaceLen is the longest namespace name, in bytes.
	MaxNamespaceLen = 64
	// MaxSecretLen is the longest namespace secret, in bytes.
	MaxSecretLen = 256
	// MinWeight is the lowest waiter weight.
	MinWeight = 1
	// MaxWeight is the highest waiter weight; the server grants a freed
	// key to the waiter whose arrival minus weight × weight_aging is
	// earliest (see Acquire.Weight).
	MaxWeight = 10
	// DefaultWeight is the weight a client uses when none is given.
	DefaultWeight = 1
	// MaxValueLen is the longest holder value (Acquire.Value,
	// Renew.Value), in bytes.
	MaxValueLen = 1024
	// MaxLockDelayMs is the longest lock-delay an Acquire may ask for
	// (Acquire.LockDelayMs), in milliseconds: one minute.
	MaxLockDelayMs = 60_000
	// MaxHoldLimitMs is the longest maximum hold time an Acquire may ask
	// for (Acquire.MaxHoldMs), in milliseconds: 24 hours.
	MaxHoldLimitMs = 24 * 60 * 60 * 1000
)

// ErrInvalid is the root of every validation error: errors.Is(err,
// ErrInvalid) holds for ErrInvalidKey, ErrInvalidNamespace, ErrInvalidWeight,
// ErrInvalidKind, ErrValueTooLarge and ErrInvalidField. A server answers a request that fails
// validation with StatusBadRequest (StatusAuthFailed for a Hello).
var ErrInvalid = errors.New("wire: invalid request")

var (
	// ErrInvalidKey reports an empty or over-long lock key.
	ErrInvalidKey = fmt.Errorf("%w: bad key", ErrInvalid)
	// ErrInvalidNamespace reports an empty, over-long or ill-formed namespace.
	ErrInvalidNamespace = fmt.Errorf("%w: bad namespace", ErrInvalid)
	// ErrInvalidWeight reports a weight outside MinWeight..MaxWeight.
	ErrInvalidWeight = fmt.Errorf("%w: bad weight", ErrInvalid)
	// ErrInvalidKind reports an unknown lock kind.
	ErrInvalidKind = fmt.Errorf("%w: bad lock kind", ErrInvalid)
	// ErrValueTooLarge reports a holder value longer than MaxValueLen.
	ErrValueTooLarge = fmt.Errorf("%w: holder value too large", ErrInvalid)
	// ErrInvalidField reports any other field that breaks its rule, such as
	// a zero wait id on a blocking acquire.
	ErrInvalidField = fmt.Errorf("%w: bad field", ErrInvalid)
)

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// KeyHash is the one hash that places a lock: FNV-1a 64 over the namespace's
// bytes, one 0x00 byte, then the key's bytes. Client and server must both
// use it; it does not allocate. Because ValidateNamespace forbids 0x00 in a
// namespace, distinct (namespace, key) pairs never feed the hash the same
// bytes.
func KeyHash(namespace, key string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(namespace); i++ {
		h ^= uint64(namespace[i])
		h *= fnvPrime64
	}
	h *= fnvPrime64 // h ^= 0x00 is a no-op
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	return h
}

// GroupOf returns the lock group, in [0, groups), of a key whose
// KeyHash is h. It returns 0 when groups is not positive.
func GroupOf(h uint64, groups int) int {
	if groups <= 0 {
		return 0
	}
	return int(h % uint64(groups))
}

// WorkerOf returns the worker, in [0, workers), that serializes a key with
// KeyHash h inside its group. It returns 0 when workers is not positive.
//
// It uses the hash's high 32 bits, where GroupOf uses h modulo the group
// count, because the two choices must be independent: with h%groups and
// h%workers, a worker count sharing a factor with the group count (15 groups,
// 3 or 5 workers) would send every key of a group to the same worker or the
// same few, leaving the rest idle.
func WorkerOf(h uint64, workers int) int {
	if workers <= 0 {
		return 0
	}
	return int((h >> 32) % uint64(workers))
}

// ValidateKey checks a lock key: 1 to MaxKeyLen bytes. Any bytes are allowed.
func ValidateKey(key string) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidKey, len(key), MaxKeyLen)
	}
	return nil
}

// ValidateValue checks a holder value: at most MaxValueLen bytes of
// anything.
func ValidateValue(v string) error {
	if len(v) > MaxValueLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(v), MaxValueLen)
	}
	return nil
}

// ValidateNamespace checks a namespace name: 1 to MaxNamespaceLen bytes of
// ASCII letters, digits, '.', '_' and '-'. Namespaces are operator-chosen
// names that appear in configuration, metrics and logs; the narrow alphabet
// also keeps 0x00, KeyHash's separator, out.
func ValidateNamespace(ns string) error {
	if len(ns) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidNamespace)
	}
	if len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidNamespace, len(ns), MaxNamespaceLen)
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: byte %#x at %d", ErrInvalidNamespace, c, i)
		}
	}
	return nil
}

// ValidateMaxHold checks an acquire's maximum hold time against
// MaxHoldLimitMs and against the TTL it asks for: a bound below the TTL
// (when both are set) would end the hold before its first renewal is
// due, which is a mistake rather than a bound.
func ValidateMaxHold(maxHoldMs, ttlMs uint32) error {
	switch {
	case maxHoldMs > MaxHoldLimitMs:
		return fmt.Errorf("%w: max hold %d ms, limit %d ms", ErrInvalidField, maxHoldMs, MaxHoldLimitMs)
	case maxHoldMs != 0 && ttlMs != 0 && maxHoldMs < ttlMs:
		return fmt.Errorf("%w: max hold %d ms below the TTL %d ms", ErrInvalidField, maxHoldMs, ttlMs)
	}
	return nil
}

// ValidateWeight checks a waiter weight: MinWeight to MaxWeight.
func ValidateWeight(w uint8) error {
	if w < MinWeight || w > MaxWeight {
		return fmt.Errorf("%w: %d not in %d..%d", ErrInvalidWeight, w, MinWeight, MaxWeight)
	}
	return nil
}

// tokenInstanceBits is how many low bits of a token hold the instance id.
const tokenInstanceBits = 48

// MakeToken builds a fencing token, groupVersion<<48 | instance. Only the
// low 48 bits of instance are kept. Tokens of one key strictly increase over
// its history; compare them as plain integers.
func MakeToken(groupVersion uint16, instance uint64) uint64 {
	return uint64(groupVersion)<<tokenInstanceBits | instance&(1<<tokenInstanceBits-1)
}

// SplitToken returns the group version and Paxos instance a token was built
// from by MakeToken.
func SplitToken(token uint64) (groupVersion uint16, instance uint64) {
	return uint16(token >> tokenInstanceBits), token & (1<<tokenInstanceBits - 1)
}
