package group

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/paxos"
)

// memKV is an in-memory state-machine keyspace: a paxos.Writer for Apply
// and a paxos.Reader for Load.
type memKV struct{ m map[string][]byte }

func newMemKV() *memKV { return &memKV{m: map[string][]byte{}} }

func (k *memKV) Set(key, v []byte) { k.m[string(key)] = bytes.Clone(v) }
func (k *memKV) Delete(key []byte) { delete(k.m, string(key)) }

func (k *memKV) Get(key []byte) ([]byte, bool, error) {
	v, ok := k.m[string(key)]
	return bytes.Clone(v), ok, nil
}

func (k *memKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	keys := make([]string, 0, len(k.m))
	for key := range k.m {
		if strings.HasPrefix(key, string(prefix)) {
			keys = append(keys, key)
		}
	}
	sort.Strings(keys)
	for _, key := range keys {
		if err := fn([]byte(key), k.m[key]); err != nil {
			return err
		}
	}
	return nil
}

func (k *memKV) clone() *memKV {
	c := newMemKV()
	for key, v := range k.m {
		c.m[key] = bytes.Clone(v)
	}
	return c
}

var _ paxos.Writer = (*memKV)(nil)
var _ paxos.Reader = (*memKV)(nil)

// ---- the reference model ----
//
// Written from docs/design.md and the wire status docs, not from state.go: a
// key is free, held by one writer (exclusive or write), or held by
// readers. A grant's token is version<<48 | instance; a reacquire by a
// current holder keeps its token; only the holder with its current token
// may renew or release (I8); an Expire names the hold's token and, when
// the master sends it, the owner.

type mHold struct {
	owner wire.Owner
	token uint64
	ttl   uint32
	value string // the holder value: set by an acquire (a reacquire replaces it) or a renew that sets it
	// permits: a semaphore hold's permits (0 for locks).
	permits uint32
}

// mLock is a key's lock. A semaphore (kind semaphore) is held by owners
// with permits each, at most limit in all when granted (a total lowered
// later may leave more in use); its limit is set by the grant that finds
// it without holders — or, inside the command that removed its last hold,
// kept from before — and changed by opSetPermits while held.
type mLock struct {
	kind  wire.Kind
	holds []mHold // in grant order
	limit uint32
}

type model struct {
	version uint64
	locks   map[string]*mLock
}

func newModel() *model { return &model{locks: map[string]*mLock{}} }

type mOutcome struct {
	status wire.Status
	token  uint64
	grants []uint64
	// fresh lists the tokens of new holds this command created (not
	// reacquires), for the I2 check.
	fresh []uint64
}

func (m *model) tok(inst uint64) uint64 { return m.version<<48 | inst }

func isWriter(k wire.Kind) bool { return k == wire.KindExclusive || k == wire.KindWrite }

// take applies one grant attempt; it returns the token (0: refused) and
// whether the hold is new.
func (m *model) take(key string, inst uint64, g grant, carry uint32) (uint64, bool) {
	o, k, ttl, v := g.owner, g.kind, g.ttlMs, g.value
	l := m.locks[key]
	if k == wire.KindSemaphore {
		return m.takeSem(key, inst, g, carry)
	}
	if l == nil || len(l.holds) == 0 {
		m.locks[key] = &mLock{kind: k, holds: []mHold{{o, m.tok(inst), ttl, v, 0}}}
		return m.tok(inst), true
	}
	if l.kind == wire.KindSemaphore {
		return 0, false
	}
	mine := -1
	for i, h := range l.holds {
		if h.owner == o {
			mine = i
		}
	}
	if isWriter(k) {
		if isWriter(l.kind) && mine == 0 {
			l.holds[0].ttl, l.holds[0].value = ttl, v
			return l.holds[0].token, false
		}
		return 0, false
	}
	if isWriter(l.kind) {
		return 0, false
	}
	if mine >= 0 {
		l.holds[mine].ttl, l.holds[mine].value = ttl, v
		return l.holds[mine].token, false
	}
	l.holds = append(l.holds, mHold{o, m.tok(inst), ttl, v, 0})
	return m.tok(inst), true
}

// takeSem is take for a semaphore grant; carry is the total of a
// semaphore whose last hold this command removed (0: none).
func (m *model) takeSem(key string, inst uint64, g grant, carry uint32) (uint64, bool) {
	l := m.locks[key]
	if l == nil || len(l.holds) == 0 {
		limit := g.limit
		if carry != 0 {
			limit = carry
		}
		if g.permits == 0 || g.permits > limit {
			return 0, false
		}
		m.locks[key] = &mLock{kind: wire.KindSemaphore, limit: limit, holds: []mHold{{g.owner, m.tok(inst), g.ttlMs, g.value, g.permits}}}
		return m.tok(inst), true
	}
	if l.kind != wire.KindSemaphore {
		return 0, false
	}
	var used uint64
	mine := -1
	for i, h := range l.holds {
		if h.owner == g.owner {
			mine = i
			continue
		}
		used += uint64(h.permits)
	}
	if mine >= 0 { // a reacquire: the token stays, the permits become the asked ones if they fit
		if g.permits == 0 || used+uint64(g.permits) > uint64(l.limit) {
			return 0, false
		}
		h := &l.holds[mine]
		h.ttl, h.value, h.permits = g.ttlMs, g.value, g.permits
		return h.token, false
	}
	if g.permits == 0 || used+uint64(g.permits) > uint64(l.limit) {
		return 0, false
	}
	l.holds = append(l.holds, mHold{g.owner, m.tok(inst), g.ttlMs, g.value, g.permits})
	return m.tok(inst), true
}

func (m *model) grantAll(key string, inst uint64, gs []grant, out *mOutcome, carry uint32) {
	if len(gs) == 0 {
		return
	}
	out.grants = make([]uint64, len(gs))
	for j, g := range gs {
		t, fresh := m.take(key, inst, g, carry)
		if len(m.locks[key].holdsOrNil()) > 0 {
			carry = 0 // the semaphore has a record again
		}
		out.grants[j] = t
		if fresh {
			out.fresh = append(out.fresh, t)
		}
	}
}

func (m *model) apply(inst uint64, c *command) mOutcome {
	if c.op == opSetVersion {
		m.version = max(m.version, c.token)
		return mOutcome{status: wire.StatusSuccess, token: m.version}
	}
	l := m.locks[c.key]
	held := l != nil && len(l.holds) > 0
	out := mOutcome{status: wire.StatusSuccess}
	switch c.op {
	case opAcquire:
		t, fresh := m.take(c.key, inst, grant{owner: c.owner, kind: c.kind, ttlMs: c.ttlMs, value: c.value, permits: c.permits, limit: c.limit}, 0)
		if t == 0 {
			out.status = wire.StatusLockOccupied
		} else {
			out.token = t
			if fresh {
				out.fresh = append(out.fresh, t)
			}
		}
	case opRenew, opRelease, opExpire:
		if !held {
			out.status = wire.StatusLockDeleted
			return out
		}
		idx := -1
		for i, h := range l.holds {
			var match bool
			if c.op == opExpire && c.owner.IsZero() {
				match = h.token == c.token
			} else {
				match = h.owner == c.owner
			}
			if match {
				idx = i
				break
			}
		}
		switch {
		case idx < 0 && c.op == opExpire:
			out.status = wire.StatusTokenError
			return out
		case idx < 0:
			out.status = wire.StatusLockChangedOwner
			return out
		case l.holds[idx].token != c.token:
			out.status = wire.StatusTokenError
			return out
		}
		out.token = c.token
		if c.op == opRenew {
			if c.ttlMs != 0 {
				l.holds[idx].ttl = c.ttlMs
			}
			if c.setValue {
				l.holds[idx].value = c.value
			}
			return out
		}
		if c.keep != 0 { // a partial release: the hold keeps c.keep permits
			if l.kind != wire.KindSemaphore || c.keep > l.holds[idx].permits {
				out.status = wire.StatusBadRequest
				return out
			}
			l.holds[idx].permits = c.keep
			m.grantAll(c.key, inst, c.grants, &out, 0)
			return out
		}
		l.holds = slices.Delete(l.holds, idx, idx+1)
		var carry uint32
		if len(l.holds) == 0 {
			delete(m.locks, c.key)
			carry = l.limit
		}
		m.grantAll(c.key, inst, c.grants, &out, carry)
	case opGrant:
		m.grantAll(c.key, inst, c.grants, &out, 0)
	case opMultiAcquire:
		return m.multi(inst, c)
	case opSetPermits:
		if held && l.kind == wire.KindSemaphore && c.limit > 0 {
			l.limit = c.limit
		}
		m.grantAll(c.key, inst, c.grants, &out, 0)
	default:
		out.status = wire.StatusError
	}
	return out
}

// multi applies a multi-acquire: every key is taken (exclusive) by its
// owner, or, if one cannot be, none is and the lock table is as before.
func (m *model) multi(inst uint64, c *command) mOutcome {
	keys, ok := decodeMultiKeys(c.data)
	if !ok {
		return mOutcome{status: wire.StatusError}
	}
	saved := map[string]*mLock{}
	for _, k := range keys {
		if l := m.locks[k.Key]; l != nil {
			saved[k.Key] = &mLock{kind: l.kind, holds: slices.Clone(l.holds), limit: l.limit}
		} else {
			saved[k.Key] = nil
		}
	}
	out := mOutcome{status: wire.StatusSuccess}
	for i, k := range keys {
		t, fresh := m.take(k.Key, inst, grant{owner: k.Owner, kind: wire.KindExclusive, ttlMs: c.ttlMs, value: c.value}, 0)
		if t == 0 {
			for key, l := range saved {
				if l == nil {
					delete(m.locks, key)
				} else {
					m.locks[key] = l
				}
			}
			return mOutcome{status: wire.StatusLockOccupied, token: uint64(i)}
		}
		out.grants = append(out.grants, t)
		if fresh {
			out.fresh = append(out.fresh, t)
		}
	}
	out.token = out.grants[0]
	return out
}

// ---- comparing the model with the state machine ----

func dumpSM(sm *StateMachine) map[string]mLock {
	out := map[string]mLock{}
	for i := range sm.shards {
		sm.forEach(i, func(key string, l *lockRec) {
			var ml mLock
			ml.kind = l.kind()
			ml.limit = l.limit()
			for i, h := range l.holds() {
				ml.holds = append(ml.holds, mHold{h.owner, h.token, h.ttlMs, l.value(i), l.permitsAt(i)})
			}
			out[key] = ml
		})
	}
	return out
}

func dumpModel(m *model) map[string]mLock {
	out := map[string]mLock{}
	for k, l := range m.locks {
		out[k] = mLock{kind: l.kind, holds: slices.Clone(l.holds), limit: l.limit}
	}
	return out
}

// checkExclusion verifies I1 on a state dump.
func checkExclusion(t *testing.T, where string, st map[string]mLock) {
	t.Helper()
	for k, l := range st {
		if len(l.holds) == 0 {
			t.Fatalf("%s: key %q has an empty record", where, k)
		}
		if l.kind == wire.KindSemaphore {
			for _, h := range l.holds {
				if h.permits == 0 {
					t.Fatalf("%s: semaphore %q: a hold of no permits", where, k)
				}
			}
		}
		if isWriter(l.kind) && len(l.holds) != 1 {
			t.Fatalf("%s: I1: key %q has %d holders of a %v lock", where, k, len(l.holds), l.kind)
		}
		seen := map[wire.Owner]bool{}
		for _, h := range l.holds {
			if seen[h.owner] {
				t.Fatalf("%s: key %q: owner %v holds twice", where, k, h.owner)
			}
			seen[h.owner] = true
		}
	}
}

// ---- the random command generator ----

type cmdGen struct {
	r      *rand.Rand
	m      *model
	keys   []string
	owners []wire.Owner
}

func newCmdGen(seed uint64, m *model) *cmdGen {
	g := &cmdGen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: m}
	// Mutex keys and read-write keys, in two namespaces.
	for _, n := range []string{"m0", "m1", "m2", "rw0", "rw1", "rw2", "rw3", "s0", "s1"} {
		g.keys = append(g.keys, fullKey("a", n))
	}
	g.keys = append(g.keys, fullKey("b", "m0"), fullKey("b", "rw0"))
	for c := uint64(1); c <= 3; c++ {
		for id := uint64(1); id <= 2; id++ {
			g.owners = append(g.owners, wire.Owner{Client: c, ID: id})
		}
	}
	return g
}

func (g *cmdGen) kindFor(key string) wire.Kind {
	_, name := splitFull(key)
	if strings.HasPrefix(name, "s") {
		return wire.KindSemaphore
	}
	if strings.HasPrefix(name, "rw") {
		if g.r.IntN(3) == 0 {
			return wire.KindWrite
		}
		return wire.KindRead
	}
	return wire.KindExclusive
}

func (g *cmdGen) owner() wire.Owner { return g.owners[g.r.IntN(len(g.owners))] }

// value returns a holder value: usually none, sometimes a short or a
// maximal one.
func (g *cmdGen) value() string {
	switch g.r.IntN(6) {
	case 0:
		return fmt.Sprintf("host-%d pid %d", g.r.IntN(4), g.r.IntN(1000))
	case 1:
		return strings.Repeat(string(rune('a'+g.r.IntN(26))), wire.MaxValueLen)
	}
	return ""
}

func (g *cmdGen) ttl() uint32 { return uint32(1000 + g.r.IntN(60000)) }

func (g *cmdGen) grants(key string) []grant {
	n := g.r.IntN(4)
	gs := make([]grant, n)
	for i := range gs {
		gs[i] = grant{owner: g.owner(), kind: g.kindFor(key), ttlMs: g.ttl(), value: g.value()}
		gs[i].permits, gs[i].limit = g.sem(key)
	}
	return gs
}

// sem returns a semaphore acquire's permits and total for key (0, 0 for
// a lock): usually the total the key has, sometimes another.
func (g *cmdGen) sem(key string) (permits, limit uint32) {
	if g.kindFor(key) != wire.KindSemaphore {
		return 0, 0
	}
	limit = uint32(2 + g.r.IntN(4))
	if l := g.m.locks[key]; l != nil && g.r.IntN(4) != 0 {
		limit = l.limit
	}
	return uint32(1 + g.r.IntN(3)), limit
}

// target picks a hold of key to act on, usually a real one with its
// token, sometimes a wrong owner or a wrong token (I8).
func (g *cmdGen) target(key string) (wire.Owner, uint64) {
	l := g.m.locks[key]
	if l == nil || g.r.IntN(8) == 0 {
		return g.owner(), uint64(g.r.IntN(1 << 20))
	}
	h := l.holds[g.r.IntN(len(l.holds))]
	switch g.r.IntN(6) {
	case 0:
		return g.owner(), h.token // maybe not a holder
	case 1:
		return h.owner, h.token + 1 + uint64(g.r.IntN(3)) // stale or future token
	case 2:
		if h.token > 0 {
			return h.owner, h.token - 1
		}
	}
	return h.owner, h.token
}

// next returns a random command for key.
func (g *cmdGen) next(key string) command {
	switch p := g.r.IntN(100); {
	case p < 5 && g.kindFor(key) == wire.KindSemaphore:
		return command{op: opSetPermits, key: key, kind: wire.KindSemaphore, limit: uint32(1 + g.r.IntN(6)), grants: g.grants(key)}
	case p < 40:
		c := command{op: opAcquire, key: key, owner: g.owner(), kind: g.kindFor(key), ttlMs: g.ttl(), value: g.value()}
		c.permits, c.limit = g.sem(key)
		return c
	case p < 55:
		o, tok := g.target(key)
		var ttl uint32
		if g.r.IntN(2) == 0 {
			ttl = g.ttl()
		}
		c := command{op: opRenew, key: key, owner: o, token: tok, ttlMs: ttl}
		if g.r.IntN(3) == 0 {
			c.setValue, c.value = true, g.value()
		}
		return c
	case p < 80:
		o, tok := g.target(key)
		c := command{op: opRelease, key: key, owner: o, token: tok, grants: g.grants(key)}
		if l := g.m.locks[key]; l != nil && l.kind == wire.KindSemaphore && g.r.IntN(3) == 0 {
			c.keep = 1 + uint32(g.r.IntN(4)) // sometimes more than held: refused
		}
		return c
	case p < 92:
		o, tok := g.target(key)
		if g.r.IntN(3) == 0 {
			o = wire.Owner{} // the token-only form
		}
		return command{op: opExpire, key: key, owner: o, token: tok, grants: g.grants(key)}
	case p < 99:
		return command{op: opGrant, key: key, grants: g.grants(key)}
	default:
		v := g.m.version + uint64(g.r.IntN(3)) // sometimes lower: a no-op
		if v > 0 {
			v--
		}
		return command{op: opSetVersion, token: v}
	}
}

// ---- the tests ----

func TestCommandCodecRoundTrip(t *testing.T) {
	t.Parallel()
	m := newModel()
	g := newCmdGen(1, m)
	for range 2000 {
		c := g.next(g.keys[g.r.IntN(len(g.keys))])
		b := appendCommand(nil, &c)
		if h := c.sizeHint(); len(b) > h {
			t.Fatalf("%+v encodes to %d bytes, over its size hint %d", c, len(b), h)
		}
		d, err := decodeCommand(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", c, err)
		}
		if len(d.grants) == 0 {
			d.grants = nil
		}
		if len(c.grants) == 0 {
			c.grants = nil
		}
		if !reflect.DeepEqual(c, d) {
			t.Fatalf("round trip: %+v became %+v", c, d)
		}
		for cut := 0; cut < len(b); cut++ {
			if _, err := decodeCommand(b[:cut]); err == nil {
				t.Fatalf("a command cut at %d/%d decoded", cut, len(b))
			}
		}
	}
}

// TestCommandSizeHintBounds: sizeHint is an upper bound even when every
// varint is at its longest (the random commands above use small numbers).
func TestCommandSizeHintBounds(t *testing.T) {
	t.Parallel()
	const u64, u32 = ^uint64(0), ^uint32(0)
	big := wire.Owner{Client: u64, ID: u64}
	g := grant{owner: big, kind: wire.KindSemaphore, ttlMs: u32, value: "waiter", permits: u32, limit: u32}
	for _, c := range []command{
		{op: opRelease, key: "ns/k", owner: big, ttlMs: u32, token: u64, data: []byte("data")},
		{op: opAcquire, key: "ns/k", owner: big, kind: wire.KindSemaphore, ttlMs: u32, token: u64, setValue: true, value: "holder", permits: u32, limit: u32},
		{op: opRelease, key: "ns/k", owner: big, ttlMs: u32, token: u64, grants: []grant{g, g, g}, setValue: true, value: "holder", permits: u32, limit: u32, keep: u32},
	} {
		if b := appendCommand(nil, &c); len(b) > c.sizeHint() {
			t.Errorf("%+v encodes to %d bytes, over its size hint %d", c, len(b), c.sizeHint())
		}
	}
}

// TestStateMachineMatchesModel drives StateMachine.Apply with long random
// sequences of encoded commands, in batches (at most one command per key
// per instance, as the master guarantees) at random increasing instances,
// and compares every outcome and the whole state with the model, checking
// I1, I2 and I8 on the way.
func TestStateMachineMatchesModel(t *testing.T) {
	t.Parallel()
	seeds, steps := 40, 1500
	if testing.Short() {
		seeds, steps = 8, 800
	}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runModel(t, seed, steps)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	m := newModel()
	g := newCmdGen(seed, m)
	workers := 1 + int(seed%5)
	sm := NewStateMachine(workers)
	kv := newMemKV()
	lastTok := map[string]uint64{} // I2: highest token granted per key
	var inst uint64
	var stats [16]int
	for step := 0; step < steps; step++ {
		inst += 1 + uint64(g.r.IntN(4))
		// One command per key per instance, on a few random keys.
		n := 1 + g.r.IntN(6)
		keys := slices.Clone(g.keys)
		g.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		var cmds []command
		var raw [][]byte
		chosen := keys[:min(n, len(keys))]
		if g.r.IntN(4) == 0 {
			// A multi-acquire of some of the chosen keys (no other
			// command of this instance touches them).
			var mk []multiEnt
			var rest []string
			for _, key := range chosen {
				if _, name := splitFull(key); !strings.HasPrefix(name, "s") && len(mk) < 3 {
					mk = append(mk, multiEnt{key: key, owner: g.owner()})
				} else {
					rest = append(rest, key)
				}
			}
			if len(mk) > 0 {
				c := command{op: opMultiAcquire, key: mk[0].key, owner: mk[0].owner, kind: wire.KindExclusive, ttlMs: g.ttl(), value: g.value(), data: encodeMultiKeys(mk)}
				cmds = append(cmds, c)
				raw = append(raw, appendCommand(nil, &c))
				chosen = rest
			}
		}
		for _, key := range chosen {
			c := g.next(key)
			cmds = append(cmds, c)
			raw = append(raw, appendCommand(nil, &c))
		}
		if g.r.IntN(20) == 0 { // garbage changes nothing
			cmds = append(cmds, command{op: 0xff})
			raw = append(raw, []byte{byte(opAcquire), 7, 0xff})
		}
		before := dumpSM(sm)
		results := make([]any, len(raw))
		sm.Apply(inst, raw, kv, results)
		where := fmt.Sprintf("seed %d step %d instance %d", seed, step, inst)
		for i, c := range cmds {
			got := results[i].(*outcome)
			if c.op == 0xff {
				if got.status != wire.StatusError {
					t.Fatalf("%s: garbage: %v", where, got.status)
				}
				continue
			}
			stats[c.op]++
			if c.op == opMultiAcquire {
				checkMulti(t, where, m, inst, &c, got, before, sm, lastTok)
				continue
			}
			prev := lastTok[c.key]
			want := m.apply(inst, &c)
			if got.status != want.status || got.token != want.token || !slices.Equal(nonEmpty(got.grants), nonEmpty(want.grants)) {
				t.Fatalf("%s: %s: got %v/%d/%v, model %v/%d/%v", where, fmtCmd(&c), got.status, got.token, got.grants, want.status, want.token, want.grants)
			}
			// A semaphore's grants never take more than its total.
			if l := m.locks[c.key]; l != nil && l.kind == wire.KindSemaphore && len(want.fresh) > 0 {
				var used uint64
				for _, h := range l.holds {
					used += uint64(h.permits)
				}
				if used > uint64(l.limit) {
					t.Fatalf("%s: %s granted past the total: %d of %d permits in use", where, fmtCmd(&c), used, l.limit)
				}
			}
			// I2: a new hold's token is above every token the key had.
			for _, tk := range want.fresh {
				if tk <= prev {
					t.Fatalf("%s: I2: %s granted token %d after %d", where, fmtCmd(&c), tk, prev)
				}
				lastTok[c.key] = max(lastTok[c.key], tk)
			}
			// I8: a renew or release by anyone but the holder with its
			// current token changes nothing.
			// A partial release keeping more than held is refused so too.
			if (c.op == opRenew || c.op == opRelease) && got.status != wire.StatusSuccess {
				if got.status != wire.StatusLockChangedOwner && got.status != wire.StatusTokenError && got.status != wire.StatusLockDeleted &&
					(c.keep == 0 || got.status != wire.StatusBadRequest) {
					t.Fatalf("%s: I8: %s answered %v", where, fmtCmd(&c), got.status)
				}
				if !reflect.DeepEqual(before[c.key], dumpSM(sm)[c.key]) {
					t.Fatalf("%s: I8: refused %s changed the lock", where, fmtCmd(&c))
				}
			}
		}
		st := dumpSM(sm)
		checkExclusion(t, where, st)
		if want := dumpModel(m); !reflect.DeepEqual(st, want) {
			t.Fatalf("%s: state differs\n sm:    %v\n model: %v", where, st, want)
		}
		if sm.Count() != int64(len(st)) || sm.Version() != m.version || sm.Applied() != inst {
			t.Fatalf("%s: count %d (want %d), version %d (want %d), applied %d", where, sm.Count(), len(st), sm.Version(), m.version, sm.Applied())
		}
		// Checkpoints at random instances write what changed since the
		// last; now and then, what was written reloads to the same state.
		if g.r.IntN(5) == 0 {
			sm.Checkpoint(kv)
		}
		if step%97 == 0 {
			checkReload(t, where, sm, kv, inst)
		}
	}
	checkReload(t, "end", sm, kv, inst)
	t.Logf("seed %d: %d multi-acquire, %d acquire, %d renew, %d release, %d expire, %d grant, %d version; %d keys held at the end",
		seed, stats[opMultiAcquire], stats[opAcquire], stats[opRenew], stats[opRelease], stats[opExpire], stats[opGrant], stats[opSetVersion], len(m.locks))
}

// checkMulti compares a multi-acquire's outcome with the model's, and
// checks that it was all or none and kept I2 on every key it granted.
func checkMulti(t *testing.T, where string, m *model, inst uint64, c *command, got *outcome, before map[string]mLock, sm *StateMachine, lastTok map[string]uint64) {
	t.Helper()
	keys, _ := decodeMultiKeys(c.data)
	prev := make([]uint64, len(keys))
	for i, k := range keys {
		prev[i] = lastTok[k.Key]
	}
	want := m.apply(inst, c)
	if got.status != want.status {
		t.Fatalf("%s: %s: got %v, model %v", where, fmtCmd(c), got.status, want.status)
	}
	after := dumpSM(sm)
	if got.status != wire.StatusSuccess {
		if got.multi == nil || uint64(got.multi.index) != want.token {
			t.Fatalf("%s: %s: refused naming key %+v, model key %d", where, fmtCmd(c), got.multi, want.token)
		}
		for _, k := range keys {
			if !reflect.DeepEqual(before[k.Key], after[k.Key]) {
				t.Fatalf("%s: %s refused but changed %q", where, fmtCmd(c), k.Key)
			}
		}
		return
	}
	if got.multi == nil || !slices.Equal(got.multi.tokens, want.grants) || got.token != want.token {
		t.Fatalf("%s: %s: tokens %+v, model %v", where, fmtCmd(c), got.multi, want.grants)
	}
	for i, k := range keys {
		if tk := got.multi.tokens[i]; slices.Contains(want.fresh, tk) {
			if tk <= prev[i] {
				t.Fatalf("%s: I2: %s granted %q token %d after %d", where, fmtCmd(c), k.Key, tk, prev[i])
			}
			lastTok[k.Key] = max(lastTok[k.Key], tk)
		}
	}
}

func nonEmpty(s []uint64) []uint64 {
	if len(s) == 0 {
		return nil
	}
	return s
}

func fmtCmd(c *command) string {
	names := map[op]string{opAcquire: "acquire", opRenew: "renew", opRelease: "release", opExpire: "expire", opSetVersion: "setversion", opGrant: "grant", opSetPermits: "setpermits", opMultiAcquire: "multiacquire"}
	return fmt.Sprintf("%s(%q %v %v tok=%d ttl=%d set=%v value=%.20q permits=%d/%d keep=%d grants=%v)", names[c.op], c.key, c.owner, c.kind, c.token, c.ttlMs, c.setValue, c.value, c.permits, c.limit, c.keep, c.grants)
}

// checkReload loads a fresh state machine (with another worker count)
// from the keyspace sm wrote and compares.
func checkReload(t *testing.T, where string, sm *StateMachine, kv *memKV, inst uint64) {
	t.Helper()
	sm.Checkpoint(kv)
	re := NewStateMachine(3)
	if err := re.Load(kv.clone(), inst); err != nil {
		t.Fatalf("%s: load: %v", where, err)
	}
	if a, b := dumpSM(re), dumpSM(sm); !reflect.DeepEqual(a, b) {
		t.Fatalf("%s: reloaded state differs\n loaded: %v\n live:   %v", where, a, b)
	}
	checkNSIndex(t, where+" (live)", sm)
	checkNSIndex(t, where+" (reloaded)", re)
	if re.Version() != sm.Version() || re.Count() != sm.Count() || re.Applied() != inst {
		t.Fatalf("%s: reloaded version %d count %d applied %d, live %d %d %d", where, re.Version(), re.Count(), re.Applied(), sm.Version(), sm.Count(), inst)
	}
}

// TestStateMachineReloadContinuesTokens: a state machine loaded from the
// keyspace gives the same outcomes as the live one for the same later
// commands, so tokens continue to increase across a restore (I2).
func TestStateMachineReloadContinuesTokens(t *testing.T) {
	t.Parallel()
	m := newModel()
	g := newCmdGen(99, m)
	sm := NewStateMachine(4)
	kv := newMemKV()
	var inst uint64
	apply := func(sms []*StateMachine, kvs []*memKV, c command) []*outcome {
		var outs []*outcome
		for i, s := range sms {
			res := make([]any, 1)
			s.Apply(inst, [][]byte{appendCommand(nil, &c)}, kvs[i], res)
			outs = append(outs, res[0].(*outcome))
		}
		return outs
	}
	for range 500 {
		inst++
		c := g.next(g.keys[g.r.IntN(len(g.keys))])
		m.apply(inst, &c)
		apply([]*StateMachine{sm}, []*memKV{kv}, c)
	}
	sm.Checkpoint(kv)
	re := NewStateMachine(2)
	kv2 := kv.clone()
	if err := re.Load(kv2, inst); err != nil {
		t.Fatal(err)
	}
	for range 500 {
		inst += 1 + uint64(g.r.IntN(3))
		c := g.next(g.keys[g.r.IntN(len(g.keys))])
		m.apply(inst, &c)
		outs := apply([]*StateMachine{sm, re}, []*memKV{kv, kv2}, c)
		if !reflect.DeepEqual(outs[0], outs[1]) {
			t.Fatalf("instance %d %s: live %+v, restored %+v", inst, fmtCmd(&c), outs[0], outs[1])
		}
	}
	sm.Checkpoint(kv)
	re.Checkpoint(kv2)
	if !reflect.DeepEqual(dumpSM(sm), dumpSM(re)) || !reflect.DeepEqual(kv.m, kv2.m) {
		t.Fatal("live and restored state machines diverged")
	}
}

// TestReadersSharingTokenExpireSeparately: readers granted in one command
// share a token; an Expire that names the owner removes only that reader.
func TestReadersSharingTokenExpireSeparately(t *testing.T) {
	t.Parallel()
	sm := NewStateMachine(2)
	kv := newMemKV()
	key := fullKey("ns", "rw")
	w, r1, r2 := owner(1, 1), owner(2, 1), owner(3, 1)
	do := func(inst uint64, c command) *outcome {
		res := make([]any, 1)
		sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, kv, res)
		return res[0].(*outcome)
	}
	if o := do(1, command{op: opAcquire, key: key, owner: w, kind: wire.KindWrite, ttlMs: 1000}); o.status != wire.StatusSuccess {
		t.Fatal(o.status)
	}
	o := do(2, command{op: opRelease, key: key, owner: w, token: 1, grants: []grant{{owner: r1, kind: wire.KindRead, ttlMs: 1000}, {owner: r2, kind: wire.KindRead, ttlMs: 1000, value: "r2"}}})
	if o.status != wire.StatusSuccess || len(o.grants) != 2 || o.grants[0] != 2 || o.grants[1] != 2 {
		t.Fatalf("grant to two readers: %+v", o)
	}
	// Expire r2's hold (token 2, shared with r1).
	if o := do(3, command{op: opExpire, key: key, owner: r2, token: 2}); o.status != wire.StatusSuccess {
		t.Fatalf("expire r2: %+v", o)
	}
	l := sm.get(key)
	if l == nil || l.n() != 1 || l.at(0).owner != r1 {
		t.Fatalf("after expiring r2 the lock is %+v, want r1 alone", l)
	}
}

// holdsOrNil returns l's holds (nil for a nil l).
func (l *mLock) holdsOrNil() []mHold {
	if l == nil {
		return nil
	}
	return l.holds
}
