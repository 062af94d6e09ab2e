package group

import (
	"encoding/binary"
	"errors"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/codec"
)

// op is a replicated command's kind.
type op uint8

const (
	opAcquire    op = 1 // grant key to owner (kind, ttl) if the state allows
	opRenew      op = 2 // refresh the TTL of owner's hold with token
	opRelease    op = 3 // remove owner's hold with token, then grant to grants
	opExpire     op = 4 // remove owner's hold with token (master-decided), then grant
	opSetVersion op = 5 // raise the group version to token (Group.RaiseVersion; migration)
	opGrant      op = 6 // grant to grants (a free or read-held key's waiters)
	// Namespace table (group 0 only; see namespace.go).
	opNamespacePut    op = 7 // key = name, data = the namespace record (a SCRAM verifier; version 1: salt and SHA-256)
	opNamespaceDelete op = 8 // key = name
	opNamespaceInit   op = 9 // data = the configured namespaces, once
	// opDowngrade turns owner's write hold with token into a read hold
	// (ttl refreshed when > 0; a read hold already: success, unchanged).
	opDowngrade op = 10
	// opMultiAcquire grants exclusive holds on several keys of the group
	// in one command, all or none (see multi.go); data lists the keys
	// and owners, key and owner are the first of them.
	opMultiAcquire op = 11
	// opSetPermits sets a held semaphore's permit total to limit, then
	// grants to grants (see semaphore.go).
	opSetPermits op = 12
	// opUndelay ends key's lock-delay (token names it), then grants to
	// grants (see lockdelay.go).
	opUndelay op = 13
	// opRevoke marks owner's hold with token revoked by an operator's
	// force-unlock (see revoke_state.go): the hold stays until its
	// holder releases it or its deadline passes.
	opRevoke op = 14
	// Cluster member list (group 0 only; see systable.Members). 16 and up, to
	// leave the numbers right after 10 to other lock operations.
	opMemberPut  op = 16 // data = one member record
	opMemberInit op = 17 // data = the configured nodes' records, once
	// Registry tables (group 0 of a meta cluster; see registry.go). 21
	// is reserved for them as well.
	opRegCluster   op = 18 // key = cluster name, data = record (none: delete)
	opRegNamespace op = 19 // key = namespace, data = record (none: delete)
	opRegMove      op = 20 // key = namespace, token = mover fencing token, data = record (none: delete)
	// opNamespaceQuota sets a namespace's quota (group 0 only; see
	// quota.go): key = name, data = the quota record.
	opNamespaceQuota op = 28
)

// grant is a hold handed to a waiter inside a release or expire.
type grant struct {
	owner wire.Owner
	kind  wire.Kind
	ttlMs uint32
	value string // the waiter's holder value
	// permits and limit: a semaphore grant's permits and the total it
	// assumes (used when the semaphore has no holders); 0 for locks.
	permits uint32
	limit   uint32
	// delayMs is the hold's lock-delay (see lockdelay.go); 0 for none.
	delayMs uint32
	// maxHoldMs is the hold's maximum hold time (see maxhold.go); 0 for
	// none.
	maxHoldMs uint32
}

// command is the decoded form of a replicated command.
type command struct {
	op     op
	key    string
	owner  wire.Owner
	kind   wire.Kind
	ttlMs  uint32
	token  uint64
	grants []grant
	data   []byte // namespace records
	// value is the holder value an acquire gives its hold, or a renew
	// with setValue sets (a renew without it keeps the hold's value).
	value    string
	setValue bool
	// permits and limit: an acquire's semaphore fields (see grant);
	// limit is opSetPermits's new total.
	permits uint32
	limit   uint32
	// delayMs is an acquire's lock-delay (see grant).
	delayMs uint32
	// maxHoldMs is an acquire's maximum hold time (see grant).
	maxHoldMs uint32
	// keep is a partial release's permits left to the hold (see
	// permits.go); 0 for a release of the whole hold.
	keep uint32
}

// Command encoding. The fields up to data are those of the first
// version; holder values follow in an optional tail, written only when a
// command carries one (the op byte then has opHasTail set), so a command
// without values has the bytes it had before values existed:
//
//	tail  = flags uvarint, [value], grantValues uvarint, grantValues × value
//	value = len uvarint, bytes
//
// flags bit 0 is setValue; bit 1 says the command's value is present.
// grantValues is 0 or len(grants). Flags bit 2 (semaphore commands only)
// says semaphore fields follow the values:
//
//	sem = permits uvarint, limit uvarint, grantSems uvarint,
//	      grantSems × (permits uvarint, limit uvarint)
//
// with grantSems 0 or len(grants). Flags bit 3 says lock-delays follow
// (see lockdelay.go):
//
//	delay = delayMs uvarint, grantDelays uvarint, grantDelays × delayMs uvarint
//
// with grantDelays 0 or len(grants). Flags bit 4 says maximum hold times
// follow (cmdHasMaxHold, see maxhold.go); bit 5 that a partial release's
// permits to keep follow them (cmdKeepPermits, see permits.go).
const (
	cmdSetValue = 1 << 0
	cmdHasValue = 1 << 1
	cmdHasSem   = 1 << 2
	cmdHasDelay = 1 << 3
	opHasTail   = 0x80 // in the op byte: the value tail follows
)

func (c *command) hasValues() bool {
	if c.setValue || c.value != "" || c.hasSem() || c.hasDelay() || c.hasMaxHold() || c.keep != 0 {
		return true
	}
	for _, g := range c.grants {
		if g.value != "" {
			return true
		}
	}
	return false
}

// hasSem reports whether c carries semaphore fields.
func (c *command) hasSem() bool {
	if c.permits != 0 || c.limit != 0 {
		return true
	}
	for _, g := range c.grants {
		if g.permits != 0 || g.limit != 0 {
			return true
		}
	}
	return false
}

var errBadCommand = errors.New("group: malformed command")

// sizeHint bounds the length appendCommand gives c from above (every
// varint counted at its longest), so that the encoding is one allocation:
// the head's seven varints, two bytes, key and data; per grant its owner,
// TTL, kind, value and semaphore fields; the tail's flags, value, count
// and semaphore fields.
func (c *command) sizeHint() int {
	const v = binary.MaxVarintLen64
	n := 2 + 7*v + len(c.key) + len(c.data)
	for _, g := range c.grants {
		n += 8*v + 1 + len(g.value)
	}
	if c.hasValues() {
		n += 11*v + len(c.value)
	}
	return n
}

func appendCommand(dst []byte, c *command) []byte {
	tail := c.hasValues()
	opb := byte(c.op)
	if tail {
		opb |= opHasTail
	}
	dst = append(dst, opb, byte(c.kind))
	dst = binary.AppendUvarint(dst, uint64(len(c.key)))
	dst = append(dst, c.key...)
	dst = binary.AppendUvarint(dst, c.owner.Client)
	dst = binary.AppendUvarint(dst, c.owner.ID)
	dst = binary.AppendUvarint(dst, uint64(c.ttlMs))
	dst = binary.AppendUvarint(dst, c.token)
	dst = binary.AppendUvarint(dst, uint64(len(c.grants)))
	for _, g := range c.grants {
		dst = binary.AppendUvarint(dst, g.owner.Client)
		dst = binary.AppendUvarint(dst, g.owner.ID)
		dst = append(dst, byte(g.kind))
		dst = binary.AppendUvarint(dst, uint64(g.ttlMs))
	}
	dst = binary.AppendUvarint(dst, uint64(len(c.data)))
	dst = append(dst, c.data...)
	if !tail {
		return dst
	}
	var flags uint64
	if c.setValue {
		flags |= cmdSetValue
	}
	if c.value != "" {
		flags |= cmdHasValue
	}
	sem := c.hasSem()
	if sem {
		flags |= cmdHasSem
	}
	delay := c.hasDelay()
	if delay {
		flags |= cmdHasDelay
	}
	maxHold := c.hasMaxHold()
	if maxHold {
		flags |= cmdHasMaxHold
	}
	if c.keep != 0 {
		flags |= cmdKeepPermits
	}
	dst = binary.AppendUvarint(dst, flags)
	if c.value != "" {
		dst = appendValue(dst, c.value)
	}
	gv := false
	for _, g := range c.grants {
		gv = gv || g.value != ""
	}
	if !gv {
		dst = binary.AppendUvarint(dst, 0)
	} else {
		dst = binary.AppendUvarint(dst, uint64(len(c.grants)))
		for _, g := range c.grants {
			dst = appendValue(dst, g.value)
		}
	}
	if sem {
		dst = appendSem(dst, c)
	}
	if delay {
		dst = appendDelay(dst, c)
	}
	if maxHold {
		dst = appendMaxHold(dst, c)
	}
	if c.keep != 0 {
		dst = binary.AppendUvarint(dst, uint64(c.keep))
	}
	return dst
}

func appendValue(dst []byte, v string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

// perGrant reads a per-grant tail of c: a count, which is 0 (nothing
// follows) or len(c.grants) (read follows once per grant, in order);
// another count is an error.
func (r *reader) perGrant(c *command, read func(g *grant)) {
	switch n := r.Uvarint(); {
	case n == 0:
	case n != uint64(len(c.grants)):
		r.Fail()
	default:
		for i := range c.grants {
			read(&c.grants[i])
		}
	}
}

// value reads a holder value; longer than wire.MaxValueLen is an error.
func (r *reader) value() string {
	n := r.Uvarint()
	if n > wire.MaxValueLen {
		r.Fail()
		return ""
	}
	return string(r.Bytes(n))
}

// reader is codec.Reader with the decoders of the lock service's own
// fields (holder values, u32s, bounded strings, per-grant tails).
type reader struct{ codec.Reader }

func newReader(b []byte) reader { return reader{codec.NewReader(b)} }

func decodeCommand(b []byte) (command, error) {
	r := newReader(b)
	var c command
	opb := r.Byte()
	c.op = op(opb &^ opHasTail)
	c.kind = wire.Kind(r.Byte())
	c.key = string(r.Bytes(r.Uvarint()))
	c.owner.Client = r.Uvarint()
	c.owner.ID = r.Uvarint()
	c.ttlMs = uint32(r.Uvarint())
	c.token = r.Uvarint()
	n := r.Uvarint()
	if n > uint64(r.Len()) {
		return command{}, errBadCommand
	}
	for i := uint64(0); i < n && !r.Failed(); i++ {
		var g grant
		g.owner.Client = r.Uvarint()
		g.owner.ID = r.Uvarint()
		g.kind = wire.Kind(r.Byte())
		g.ttlMs = uint32(r.Uvarint())
		c.grants = append(c.grants, g)
	}
	if d := r.Bytes(r.Uvarint()); len(d) > 0 {
		c.data = append([]byte(nil), d...)
	}
	if opb&opHasTail != 0 && !r.Failed() {
		flags := r.Uvarint()
		c.setValue = flags&cmdSetValue != 0
		if flags&cmdHasValue != 0 {
			c.value = r.value()
		}
		r.perGrant(&c, func(g *grant) { g.value = r.value() })
		if flags&cmdHasSem != 0 {
			decodeSem(&r, &c)
		}
		if flags&cmdHasDelay != 0 {
			decodeDelay(&r, &c)
		}
		if flags&cmdHasMaxHold != 0 {
			decodeMaxHold(&r, &c)
		}
		if flags&cmdKeepPermits != 0 {
			decodeKeep(&r, &c)
		}
		if flags&^(cmdSetValue|cmdHasValue|cmdHasSem|cmdHasDelay|cmdHasMaxHold|cmdKeepPermits) != 0 {
			r.Fail()
		}
	}
	if !r.Done() || !c.kind.Valid() {
		return command{}, errBadCommand
	}
	return c, nil
}

// hasGrantField reports whether a command's own value of a tail field, or
// any of its grants' (get), is set.
func hasGrantField(own uint32, grants []grant, get func(*grant) uint32) bool {
	if own != 0 {
		return true
	}
	for i := range grants {
		if get(&grants[i]) != 0 {
			return true
		}
	}
	return false
}

// appendGrantField writes a tail field the way the command tail lays
// each out: the command's own value, then 0 when no grant sets it, else
// len(grants) and each grant's value (read back with reader.perGrant).
func appendGrantField(dst []byte, own uint32, grants []grant, get func(*grant) uint32) []byte {
	dst = binary.AppendUvarint(dst, uint64(own))
	if !hasGrantField(0, grants, get) {
		return binary.AppendUvarint(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(grants)))
	for i := range grants {
		dst = binary.AppendUvarint(dst, uint64(get(&grants[i])))
	}
	return dst
}
