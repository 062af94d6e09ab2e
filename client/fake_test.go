package client

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/fakewire"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// fakeCluster is a set of fake nodes sharing one view: one node masters
// every group. Each node is a fakewire.Server (the real session layer)
// that answers lock requests with simple in-memory lock semantics, enough
// to exercise the client without the real server.
type fakeCluster struct {
	t      testing.TB
	groups int

	mu      sync.Mutex
	version uint64
	master  *fakeNode
	nodes   []*fakeNode
}

const (
	fakeNS     = "test-ns"
	fakeSecret = "s3cret"
)

func newFakeCluster(t testing.TB, nodes int) *fakeCluster {
	t.Helper()
	fc := &fakeCluster{t: t, groups: 4, version: 1}
	for i := 0; i < nodes; i++ {
		fc.nodes = append(fc.nodes, newFakeNode(t, fc, uint32(i+1)))
	}
	fc.master = fc.nodes[0]
	t.Cleanup(func() {
		for _, n := range fc.nodes {
			n.close()
		}
	})
	return fc
}

func (fc *fakeCluster) view() *wire.View {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	v := &wire.View{Version: fc.version}
	for g := 0; g < fc.groups; g++ {
		gv := wire.GroupView{Epoch: fc.version}
		if fc.master != nil {
			gv.Master, gv.Addr = fc.master.id, fc.master.addr
		}
		v.Groups = append(v.Groups, gv)
	}
	for _, n := range fc.nodes {
		v.Nodes = append(v.Nodes, wire.NodeView{ID: n.id, Addr: n.addr, Alive: true})
	}
	return v
}

// setMaster makes n the master of every group (nil: none) and pushes the
// new view to every subscriber.
func (fc *fakeCluster) setMaster(n *fakeNode) {
	fc.mu.Lock()
	fc.master = n
	fc.version++
	fc.mu.Unlock()
	v := fc.view()
	for _, node := range fc.nodes {
		node.pushView(v)
	}
}

type flock struct {
	kind    wire.Kind
	holders map[wire.Owner]*fhold
}

type fhold struct {
	token uint64
	conn  *fakewire.Conn
	ttlMs uint32
}

type fwaiter struct {
	req  wire.Acquire
	conn *fakewire.Conn
	seq  int
}

type fwatch struct {
	id         uint64
	token      uint64
	continuous bool
	conn       *fakewire.Conn
	// prefix and group, for a prefix watch (kept under fakePrefixKey).
	prefix string
	group  uint32
}

// fakePrefixKey is where a fake node keeps the prefix watches of prefix
// on group g in fakeNode.watches: no key starts with a NUL.
func fakePrefixKey(g uint32, prefix string) string { return fmt.Sprintf("\x00%d\x00%s", g, prefix) }

// fakeNode is one fake server node: a fakewire.Server, whose session
// layer answers the handshake and Heartbeats, with the node's lock table
// and view behind its handlers.
type fakeNode struct {
	fc   *fakeCluster
	id   uint32
	srv  *fakewire.Server
	addr string
	// refusing refuses every handshake AUTH_FAILED (the namespace
	// removed); refusals counts the handshakes refused so.
	refusing atomic.Bool
	refusals atomic.Int64

	mu      sync.Mutex
	subs    map[*fakewire.Conn]bool // the connections subscribed to views
	locks   map[string]*flock
	waiters map[string][]*fwaiter
	watches map[string][]*fwatch
	token   uint64
	seq     int
	changed chan struct{} // closed and replaced on every request handled

	// Behaviour knobs, guarded by mu.
	redirect        string      // answer keyed requests MASTER_REDIRECT to this
	noMaster        bool        // answer keyed requests NO_MASTER
	moving          bool        // answer keyed requests MOVING
	movedTo         string      // answer keyed requests MOVED with this Redirect
	overloaded      int         // answer this many more keyed requests OVERLOADED (negative: all)
	retryAfterMs    uint32      // the RetryAfterMs of those OVERLOADED answers
	renewStatus     wire.Status // if nonzero, answer renews with it
	dropRenews      bool        // never answer renews
	slowRenews      int         // answer this many more renews only after renewDelay
	slowAcquires    int         // answer this many more acquires only after renewDelay
	renewDelay      time.Duration
	suppressGranted bool        // grant waiters without pushing Granted
	maxTTLMs        uint32      // if nonzero, clamp TTLs to it, as a server's max_ttl
	oldGranted      bool        // push Granted without TTLMs, as a server before the field
	holdGranted     bool        // keep Granted pushes in heldGranted until releaseGranted
	heldGranted     []func()    // the pushes holdGranted kept
	grantedAt       []time.Time // when each waiter was granted
	renewedAt       []time.Time // when each Renew was answered SUCCESS
}

// fakeVerifier is the fake cluster's verifier of fakeSecret.
var fakeVerifier = fakewire.MustVerifier(fakeSecret)

// keyedTypes are the requests a fake node's lock table answers.
var keyedTypes = []wire.Type{
	wire.TypeAcquire, wire.TypeRenew, wire.TypeRelease, wire.TypeState,
	wire.TypeCancelWait, wire.TypeWatch, wire.TypeUnwatch,
}

func newFakeNode(t testing.TB, fc *fakeCluster, id uint32) *fakeNode {
	n := &fakeNode{
		fc: fc, id: id,
		subs:    make(map[*fakewire.Conn]bool),
		locks:   make(map[string]*flock),
		waiters: make(map[string][]*fwaiter),
		watches: make(map[string][]*fwatch),
		changed: make(chan struct{}),
	}
	n.srv = fakewire.New(t, fakewire.Config{
		Verifiers:   map[string]scramauth.Verifier{fakeNS: fakeVerifier},
		ViewVersion: func() uint64 { return fc.view().Version },
		Closed:      n.forget,
		Refuse: func(string) bool {
			if !n.refusing.Load() {
				return false
			}
			n.refusals.Add(1)
			return true
		},
	})
	n.addr = n.srv.Addr()
	n.srv.Handle(wire.TypeGetView, n.serveView)
	n.srv.Handle(wire.TypeSubscribeView, n.serveView)
	for _, typ := range keyedTypes {
		n.srv.Handle(typ, n.handle)
	}
	return n
}

func (n *fakeNode) close() { n.srv.Close() }

// kick closes every client connection.
func (n *fakeNode) kick() { n.srv.CloseConns() }

func (n *fakeNode) set(f func(n *fakeNode)) {
	n.mu.Lock()
	f(n)
	n.mu.Unlock()
}

// count returns how many requests of type typ the node has received (the
// handshake's included: a ScramClientFinal ends each). It does not take
// the node's lock, so a waitFor condition may call it.
func (n *fakeNode) count(typ wire.Type) int { return n.srv.Count(typ) }

// conns returns how many client connections are open.
func (n *fakeNode) conns() int { return len(n.srv.Conns()) }

func (n *fakeNode) changedLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// waitFor waits until cond (evaluated under the node's lock) holds. It
// is woken by every request the node's handlers answer, and polls for
// what the session answers (the handshake, Heartbeats).
func (n *fakeNode) waitFor(t testing.TB, what string, cond func(n *fakeNode) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		n.mu.Lock()
		ok := cond(n)
		ch := n.changed
		n.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func (n *fakeNode) holderOf(key string) (wire.Owner, uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.locks[key]
	if l == nil || len(l.holders) == 0 {
		return wire.Owner{}, 0, false
	}
	for o, h := range l.holders {
		return o, h.token, true
	}
	return wire.Owner{}, 0, false
}

// serveView answers GetView and SubscribeView with the cluster's view.
func (n *fakeNode) serveView(c *fakewire.Conn, id uint64, m wire.Message) {
	v := n.fc.view()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.changedLocked()
	if _, ok := m.(*wire.SubscribeView); ok {
		n.subs[c] = true
	}
	c.Send(wire.TypeView, id, v) // under n.mu so no push overtakes it
}

// handle answers a keyed request (keyedTypes) from the lock table, or
// with the refusal the knobs ask for.
func (n *fakeNode) handle(c *fakewire.Conn, id uint64, m wire.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.changedLocked()
	switch {
	case n.redirect != "":
		c.Reply(id, wire.Response{Status: wire.StatusMasterRedirect, Redirect: n.redirect})
		return
	case n.noMaster:
		c.Reply(id, wire.Response{Status: wire.StatusNoMaster, RetryAfterMs: 5})
		return
	case n.moving:
		c.Reply(id, wire.Response{Status: wire.StatusMoving, RetryAfterMs: 5})
		return
	case n.movedTo != "":
		c.Reply(id, wire.Response{Status: wire.StatusMoved, Redirect: n.movedTo})
		return
	case n.overloaded != 0:
		n.overloaded--
		c.Reply(id, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: n.retryAfterMs, Msg: "fake: overloaded"})
		return
	}
	switch r := m.(type) {
	case *wire.Acquire:
		if n.slowAcquires > 0 {
			n.slowAcquires--
			d := n.renewDelay
			n.mu.Unlock()
			time.Sleep(d) // a slow master: this connection answers nothing meanwhile
			n.mu.Lock()
		}
		c.Reply(id, n.acquireLocked(c, r))
	case *wire.Renew:
		if n.dropRenews {
			return
		}
		if n.slowRenews > 0 {
			n.slowRenews--
			d := n.renewDelay
			n.mu.Unlock()
			time.Sleep(d) // a slow master: this connection answers nothing meanwhile
			n.mu.Lock()
		}
		if n.renewStatus != 0 {
			c.Reply(id, wire.Response{Status: n.renewStatus})
			return
		}
		st, h := n.checkLocked(r.Key, r.Owner, r.Token)
		if st == wire.StatusSuccess {
			h.conn = c
			if r.TTLMs != 0 {
				h.ttlMs = n.ttlLocked(r.TTLMs)
			}
			n.renewedAt = append(n.renewedAt, time.Now())
			c.Reply(id, wire.Response{Status: st, Token: r.Token, TTLLeftMs: h.ttlMs})
			return
		}
		c.Reply(id, wire.Response{Status: st})
	case *wire.Release:
		st, _ := n.checkLocked(r.Key, r.Owner, r.Token)
		if st == wire.StatusSuccess {
			n.dropHolderLocked(r.Key, r.Owner, wire.EventReleased)
		}
		c.Reply(id, wire.Response{Status: st})
	case *wire.State:
		l := n.locks[r.Key]
		if l == nil || len(l.holders) == 0 {
			c.Reply(id, wire.Response{Status: wire.StatusLockDeleted, QueueLen: uint32(len(n.waiters[r.Key]))})
			return
		}
		resp := wire.Response{Status: wire.StatusSuccess, Kind: l.kind, QueueLen: uint32(len(n.waiters[r.Key]))}
		for o, h := range l.holders {
			resp.Holder, resp.Token, resp.TTLLeftMs = o, h.token, h.ttlMs
			break
		}
		if l.kind == wire.KindRead {
			resp.Readers = uint32(len(l.holders))
		}
		c.Reply(id, resp)
	case *wire.CancelWait:
		ws := n.waiters[r.Key]
		for i, w := range ws {
			if w.req.Owner == r.Owner && w.req.WaitID == r.WaitID {
				n.waiters[r.Key] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		resp := wire.Response{Status: wire.StatusSuccess}
		if l := n.locks[r.Key]; l != nil {
			if h := l.holders[r.Owner]; h != nil {
				resp.Token = h.token
			}
		}
		c.Reply(id, resp)
	case *wire.Watch:
		c.Reply(id, wire.Response{Status: wire.StatusSuccess})
		if r.Flags.Has(wire.FlagPrefix) {
			k := fakePrefixKey(r.Group, r.Key)
			n.watches[k] = append(n.watches[k], &fwatch{id: r.WatchID, continuous: true, conn: c, prefix: r.Key, group: r.Group})
			return
		}
		cur, holder := n.currentLocked(r.Key)
		w := &fwatch{id: r.WatchID, token: r.Token, continuous: r.Flags.Has(wire.FlagContinuous), conn: c}
		switch {
		case cur > r.Token:
			c.Send(wire.TypeWatchEvent, 0, &wire.WatchEvent{WatchID: r.WatchID, Key: r.Key, Event: wire.EventAcquired, Token: cur, Holder: holder})
			if !w.continuous {
				return
			}
			w.token = cur
		case r.Token != 0 && cur < r.Token:
			c.Send(wire.TypeWatchEvent, 0, &wire.WatchEvent{WatchID: r.WatchID, Key: r.Key, Event: wire.EventReleased, Token: r.Token})
			if !w.continuous {
				return
			}
		}
		n.watches[r.Key] = append(n.watches[r.Key], w)
	case *wire.Unwatch:
		k := r.Key
		if r.Flags.Has(wire.FlagPrefix) {
			k = fakePrefixKey(r.Group, r.Key)
		}
		ws := n.watches[k]
		for i, w := range ws {
			if w.id == r.WatchID && w.conn == c {
				n.watches[k] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		c.Reply(id, wire.Response{Status: wire.StatusSuccess})
	default:
		c.Reply(id, wire.Response{Status: wire.StatusBadRequest, Msg: "unsupported"})
	}
}

// ttlLocked is the TTL the node applies to a request for ttlMs.
func (n *fakeNode) ttlLocked(ttlMs uint32) uint32 {
	if n.maxTTLMs != 0 && ttlMs > n.maxTTLMs {
		return n.maxTTLMs
	}
	return ttlMs
}

// releaseGranted sends the Granted pushes holdGranted kept back, and stops
// keeping them.
func (n *fakeNode) releaseGranted() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.holdGranted = false
	for _, push := range n.heldGranted {
		push()
	}
	n.heldGranted = nil
}

func (n *fakeNode) currentLocked(key string) (uint64, wire.Owner) {
	var cur uint64
	var holder wire.Owner
	if l := n.locks[key]; l != nil {
		for o, h := range l.holders {
			if h.token > cur {
				cur, holder = h.token, o
			}
		}
	}
	return cur, holder
}

func (n *fakeNode) checkLocked(key string, o wire.Owner, token uint64) (wire.Status, *fhold) {
	l := n.locks[key]
	if l == nil || len(l.holders) == 0 {
		return wire.StatusLockDeleted, nil
	}
	h := l.holders[o]
	if h == nil {
		return wire.StatusLockChangedOwner, nil
	}
	if h.token != token {
		return wire.StatusTokenError, nil
	}
	return wire.StatusSuccess, h
}

// canGrantLocked reports whether o may take key in kind k now.
func (n *fakeNode) canGrantLocked(key string, o wire.Owner, k wire.Kind) (ok, again bool) {
	l := n.locks[key]
	if l == nil || len(l.holders) == 0 {
		return true, false
	}
	_, mine := l.holders[o]
	if k != wire.KindRead {
		return mine && len(l.holders) == 1 && l.kind != wire.KindRead, true
	}
	if l.kind != wire.KindRead {
		return false, false
	}
	return true, mine
}

func (n *fakeNode) grantLocked(key string, o wire.Owner, k wire.Kind, ttlMs uint32, c *fakewire.Conn) uint64 {
	l := n.locks[key]
	if l == nil {
		l = &flock{holders: make(map[wire.Owner]*fhold)}
		n.locks[key] = l
	}
	if h := l.holders[o]; h != nil {
		h.conn, h.ttlMs = c, ttlMs
		return h.token
	}
	n.token++
	l.kind = k
	l.holders[o] = &fhold{token: n.token, conn: c, ttlMs: ttlMs}
	n.notifyLocked(key, wire.EventAcquired, n.token, o)
	return n.token
}

func (n *fakeNode) acquireLocked(c *fakewire.Conn, r *wire.Acquire) wire.Response {
	ok, again := n.canGrantLocked(r.Key, r.Owner, r.Kind)
	if ok && !again {
		for _, w := range n.waiters[r.Key] {
			if w.req.Weight >= r.Weight || (r.Kind == wire.KindRead && w.req.Kind != wire.KindRead) {
				ok = false
			}
		}
	}
	if ok {
		ttl := n.ttlLocked(r.TTLMs)
		tok := n.grantLocked(r.Key, r.Owner, r.Kind, ttl, c)
		return wire.Response{Status: wire.StatusSuccess, Token: tok, TTLLeftMs: ttl}
	}
	for _, w := range n.waiters[r.Key] {
		if w.req.Owner == r.Owner && w.req.WaitID == r.WaitID && r.WaitID != 0 {
			w.conn = c
			return wire.Response{Status: wire.StatusLockWait, QueueLen: uint32(len(n.waiters[r.Key]))}
		}
	}
	if r.MaxWaitMs == 0 {
		resp := wire.Response{Status: wire.StatusLockOccupied, QueueLen: uint32(len(n.waiters[r.Key]))}
		l := n.locks[r.Key]
		resp.Kind = l.kind
		for o, h := range l.holders {
			resp.Holder, resp.Token, resp.TTLLeftMs = o, h.token, h.ttlMs
			break
		}
		return resp
	}
	n.seq++
	w := &fwaiter{req: *r, conn: c, seq: n.seq}
	n.waiters[r.Key] = append(n.waiters[r.Key], w)
	sort.SliceStable(n.waiters[r.Key], func(i, j int) bool {
		return n.waiters[r.Key][i].req.Weight > n.waiters[r.Key][j].req.Weight
	})
	if r.MaxWaitMs != wire.WaitForever {
		key, waitID, owner := r.Key, r.WaitID, r.Owner
		time.AfterFunc(time.Duration(r.MaxWaitMs)*time.Millisecond, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			ws := n.waiters[key]
			for i, w := range ws {
				if w.req.Owner == owner && w.req.WaitID == waitID {
					n.waiters[key] = append(ws[:i:i], ws[i+1:]...)
					w.conn.Send(wire.TypeGranted, 0, &wire.Granted{WaitID: waitID, Key: key, Status: wire.StatusTimeout, Owner: owner})
					return
				}
			}
		})
	}
	return wire.Response{Status: wire.StatusLockWait, QueueLen: uint32(len(n.waiters[r.Key]))}
}

// dropHolderLocked removes o's hold on key and hands the key to waiters.
func (n *fakeNode) dropHolderLocked(key string, o wire.Owner, ev wire.Event) {
	l := n.locks[key]
	h := l.holders[o]
	delete(l.holders, o)
	n.notifyLocked(key, ev, h.token, wire.Owner{})
	n.grantWaitersLocked(key)
}

func (n *fakeNode) grantWaitersLocked(key string) {
	for len(n.waiters[key]) > 0 {
		w := n.waiters[key][0]
		if ok, _ := n.canGrantLocked(key, w.req.Owner, w.req.Kind); !ok {
			return
		}
		n.waiters[key] = n.waiters[key][1:]
		ttl := n.ttlLocked(w.req.TTLMs)
		tok := n.grantLocked(key, w.req.Owner, w.req.Kind, ttl, w.conn)
		n.grantedAt = append(n.grantedAt, time.Now())
		g := &wire.Granted{WaitID: w.req.WaitID, Key: key, Status: wire.StatusSuccess, Token: tok, Owner: w.req.Owner, TTLMs: ttl}
		if n.oldGranted {
			g.TTLMs = 0
		}
		switch conn := w.conn; {
		case n.suppressGranted:
		case n.holdGranted:
			n.heldGranted = append(n.heldGranted, func() { conn.Send(wire.TypeGranted, 0, g) })
		default:
			conn.Send(wire.TypeGranted, 0, g)
		}
		if w.req.Kind != wire.KindRead {
			return
		}
	}
}

func (n *fakeNode) notifyLocked(key string, ev wire.Event, token uint64, holder wire.Owner) {
	g := uint32(wire.GroupOf(wire.KeyHash(fakeNS, key), n.fc.groups))
	for k, ws := range n.watches {
		if !strings.HasPrefix(k, "\x00") {
			continue
		}
		for _, w := range ws {
			if w.group == g && strings.HasPrefix(key, w.prefix) {
				w.conn.Send(wire.TypeWatchEvent, 0, &wire.WatchEvent{WatchID: w.id, Key: key, Event: ev, Token: token, Holder: holder})
			}
		}
	}
	var keep []*fwatch
	for _, w := range n.watches[key] {
		if ev == wire.EventAcquired && token <= w.token {
			keep = append(keep, w)
			continue
		}
		w.conn.Send(wire.TypeWatchEvent, 0, &wire.WatchEvent{WatchID: w.id, Key: key, Event: ev, Token: token, Holder: holder})
		if w.continuous {
			w.token = max(w.token, token)
			keep = append(keep, w)
		}
	}
	n.watches[key] = keep
}

// revoke removes key's holds as if they expired, pushing Lost to holders.
func (n *fakeNode) revoke(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := n.locks[key]
	if l == nil {
		return
	}
	for o, h := range l.holders {
		if h.conn != nil {
			h.conn.Send(wire.TypeLost, 0, &wire.Lost{Key: key, Token: h.token, Owner: o, Event: wire.EventExpired})
		}
		n.dropHolderLocked(key, o, wire.EventExpired)
	}
}

// revokeKeep pushes Lost EventRevoked to key's holders and keeps their
// holds, as a real master does until the holder acknowledges with a
// Release.
func (n *fakeNode) revokeKeep(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.locks[key]; l != nil {
		for o, h := range l.holders {
			if h.conn != nil {
				h.conn.Send(wire.TypeLost, 0, &wire.Lost{Key: key, Token: h.token, Owner: o, Event: wire.EventRevoked})
			}
		}
	}
}

// forget drops a closed connection's subscription, waiters and watches,
// as the real server does.
func (n *fakeNode) forget(c *fakewire.Conn) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.subs, c)
	n.forgetLocked(c)
}

// forgetLocked drops a closed connection's waiters and watches.
func (n *fakeNode) forgetLocked(c *fakewire.Conn) {
	for key, ws := range n.waiters {
		var keep []*fwaiter
		for _, w := range ws {
			if w.conn != c {
				keep = append(keep, w)
			}
		}
		n.waiters[key] = keep
	}
	for key, ws := range n.watches {
		var keep []*fwatch
		for _, w := range ws {
			if w.conn != c {
				keep = append(keep, w)
			}
		}
		n.watches[key] = keep
	}
	for _, l := range n.locks {
		for _, h := range l.holders {
			if h.conn == c {
				h.conn = nil
			}
		}
	}
}

// pushView sends v to every subscribed connection.
func (n *fakeNode) pushView(v *wire.View) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for c := range n.subs {
		c.Send(wire.TypeViewChanged, 0, v)
	}
}
