package server

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// rawConn speaks the protocol by hand, for tests of the server's edges.
//
// call, callOnce and callAny talk to the node the connection was opened
// to, so that a test can assert what that node answers (a redirect, a
// refusal). callMaster and awaitGranted are for requests whose point is
// the lock service's answer, not one node's: they follow the key's master
// where a master change sends them (see callMaster).
type rawConn struct {
	t   testing.TB
	c   net.Conn
	buf []byte
	id  uint64
	// addr is the address c was opened to, and dial opens another
	// connection the same way (plain or TLS), for following a redirect.
	addr string
	dial func(addr string) (net.Conn, error)
	// ns, secret and client are the last accepted hello's, said again on
	// a connection opened to follow a redirect, so that every request
	// after it comes from the same client id.
	ns, secret string
	client     uint64
}

// masterFollowTimeout bounds how long callMaster and awaitGranted follow
// master changes: several failovers of testLease on a loaded machine.
const masterFollowTimeout = 60 * time.Second

func dialRaw(t testing.TB, addr string) *rawConn {
	return dialRawWith(t, addr, func(addr string) (net.Conn, error) {
		return net.DialTimeout("tcp", addr, 5*time.Second)
	})
}

// dialRawWith opens a rawConn to addr with dial, which also opens the
// connections that follow a redirect. The connection open last is
// closed when t ends.
func dialRawWith(t testing.TB, addr string, dial func(addr string) (net.Conn, error)) *rawConn {
	t.Helper()
	c, err := dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawConn{t: t, c: c, addr: addr, dial: dial}
	t.Cleanup(func() { r.c.Close() })
	return r
}

func (r *rawConn) send(typ wire.Type, m wire.Message) uint64 {
	r.id++
	b, err := wire.AppendFrame(nil, typ, r.id, m)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
	return r.id
}

// read returns the next frame (reply or push).
func (r *rawConn) read() (wire.Frame, wire.Message, error) {
	if err := r.c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return wire.Frame{}, nil, err
	}
	f, buf, err := wire.ReadFrame(r.c, r.buf, wire.DefaultMaxFrame)
	r.buf = buf
	if err != nil {
		return f, nil, err
	}
	m, err := wire.Decode(f.Type, f.Body)
	return f, m, err
}

// call sends a request and returns its Response, skipping pushes.
//
// A NO_MASTER answer (a group between masters: on a loaded machine a
// lease may lapse right after a cluster's start) is retried after its
// RetryAfterMs, as a client does, for up to 30 s; the last answer is
// returned. Every attempt goes to the node the connection is open to.
func (r *rawConn) call(typ wire.Type, m wire.Message) *wire.Response {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := r.callOnce(typ, m)
		if resp.Status != wire.StatusNoMaster || time.Now().After(deadline) {
			return resp
		}
		time.Sleep(time.Duration(max(resp.RetryAfterMs, 10)) * time.Millisecond)
	}
}

// callOnce sends m and returns its answer, skipping pushes and other
// replies.
func (r *rawConn) callOnce(typ wire.Type, m wire.Message) *wire.Response {
	id := r.send(typ, m)
	for {
		f, msg, err := r.read()
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		if f.ReqID == id {
			resp, ok := msg.(*wire.Response)
			if !ok {
				r.t.Fatalf("reply to %v is %T", typ, msg)
			}
			return resp
		}
	}
}

// callAny sends a request and returns its reply, whatever its type,
// skipping pushes.
func (r *rawConn) callAny(typ wire.Type, m wire.Message) wire.Message {
	id := r.send(typ, m)
	for {
		f, msg, err := r.read()
		if err != nil {
			r.t.Fatalf("read: %v", err)
		}
		if f.ReqID == id {
			return msg
		}
	}
}

// hello authenticates (SCRAM) as test client n: with key testKey(n), so
// with client id cid(n). An accepted hello is the one callMaster says
// again on a connection it opens.
func (r *rawConn) hello(ns, secret string, n uint64) *wire.Response {
	resp, err := testutil.ScramHello(r.callAny, ns, secret, testKey(n))
	if err != nil {
		r.t.Fatalf("handshake: %v", err)
	}
	if resp.Status == wire.StatusSuccess {
		r.ns, r.secret, r.client = ns, secret, n
	}
	return resp
}

// callMaster sends a routed request and returns the answer of the key's
// master, following a master change as a client does: a MASTER_REDIRECT
// naming the master is followed there (a new connection, the same hello,
// the same request: the owner and WaitID it carries stay the request's,
// so a re-sent acquire stays one hold and one wait), and the answers a
// master change leaves (masterChange) are sent again after their
// RetryAfterMs. It returns the first other answer, or the last one after
// masterFollowTimeout. Its Redirects are left as m has them, so that no
// node forwards what the test sends: the answer comes from the node the
// connection is open to when it returns.
func (r *rawConn) callMaster(typ wire.Type, m wire.Routed) *wire.Response {
	r.t.Helper()
	deadline := time.Now().Add(masterFollowTimeout)
	for redirects := 0; ; {
		resp := r.callOnce(typ, m)
		if !masterChange(resp.Status) || time.Now().After(deadline) {
			return resp
		}
		if resp.Status == wire.StatusMasterRedirect && resp.Redirect != "" && resp.Redirect != r.addr {
			r.t.Logf("%v %q: %s redirects to %s", typ, m.RoutingKey(), r.addr, resp.Redirect)
			r.redial(resp.Redirect)
			// Views that disagree for a moment may send the request
			// back and forth: the hops after the second wait a little.
			if redirects++; redirects > 2 {
				time.Sleep(min(time.Duration(redirects)*20*time.Millisecond, 500*time.Millisecond))
			}
			continue
		}
		time.Sleep(time.Duration(max(resp.RetryAfterMs, 10)) * time.Millisecond)
	}
}

// masterChange reports whether st is an answer a master change gives a
// request that would otherwise succeed: MASTER_REDIRECT (the master is
// elsewhere, or, naming nobody, not known yet), NO_MASTER (an election
// is under way) or TIMEOUT (a proposal in flight when the master stepped
// down, its outcome unknown; a re-sent acquire by the holder keeps its
// token). The other retryable statuses, OVERLOADED and MOVING, are not
// followed: a test may be asserting them, and no master change causes
// them.
func masterChange(st wire.Status) bool {
	return st == wire.StatusMasterRedirect || st == wire.StatusNoMaster || st == wire.StatusTimeout
}

// redial replaces the connection by one to addr, authenticated with the
// last accepted hello. The old connection is closed: what it left on its
// node (waits, watches) ends there, as a client's that moved on.
func (r *rawConn) redial(addr string) {
	r.t.Helper()
	if r.ns == "" {
		r.t.Fatalf("redirected to %s before an accepted hello", addr)
	}
	c, err := r.dial(addr)
	if err != nil {
		r.t.Fatalf("follow the redirect to %s: %v", addr, err)
	}
	r.c.Close()
	r.c, r.addr, r.buf = c, addr, nil
	if resp := r.hello(r.ns, r.secret, r.client); resp.Status != wire.StatusSuccess {
		r.t.Fatalf("hello to %s after a redirect: %+v", addr, resp)
	}
}

// awaitGranted returns the outcome of the blocking acquire acq, which
// callMaster answered LOCK_WAIT on this connection: the Granted push with
// acq's WaitID. A Granted that ends the wait because the master stepped
// down (NO_MASTER) is answered
// as a client does: acq is sent again, same owner and WaitID, with
// callMaster, to the master of the moment; a SUCCESS to that re-send is
// the wait's outcome (the key was free when it arrived), returned as a
// Granted. Other pushes are skipped.
func (r *rawConn) awaitGranted(acq *wire.Acquire) *wire.Granted {
	r.t.Helper()
	deadline := time.Now().Add(masterFollowTimeout)
	for {
		f, m, err := r.read()
		if err != nil {
			r.t.Fatalf("waiting for the grant of wait %d: %v", acq.WaitID, err)
		}
		g, ok := m.(*wire.Granted)
		if !ok || f.ReqID != 0 || g.WaitID != acq.WaitID {
			continue
		}
		if g.Status != wire.StatusNoMaster || time.Now().After(deadline) {
			return g
		}
		r.t.Logf("wait %d on %q ended %v: sent again", acq.WaitID, acq.Key, g.Status)
		switch resp := r.callMaster(wire.TypeAcquire, acq); resp.Status {
		case wire.StatusLockWait:
		case wire.StatusSuccess:
			return &wire.Granted{WaitID: acq.WaitID, Key: acq.Key, Status: resp.Status, Token: resp.Token, Owner: acq.Owner}
		default:
			r.t.Fatalf("wait %d sent again: %+v", acq.WaitID, resp)
		}
	}
}

// TestRawConnFollowsMasterChange: callMaster takes a request sent to a
// node that is not the key's master to the master, and awaitGranted
// carries a blocked acquire over a hand-off of its group: the old master
// ends the wait NO_MASTER, the acquire is sent again to the new master
// by the same owner, and the release that follows grants it there.
func TestRawConnFollowsMasterChange(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	const key = "followed"
	mi := tc.masterIndex("ns", key)
	g := group.ID(wire.GroupOf(wire.KeyHash("ns", key), 15))
	master, next := tc.cfgs[mi].self(), tc.cfgs[(mi+1)%3].self()

	holder := dialRaw(t, next.Client)
	holder.hello("ns", "s3cret", 1)
	owner := wire.Owner{Client: cid(1), ID: 1}
	r := holder.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: owner, Weight: 1, TTLMs: 60000})
	if r.Status != wire.StatusSuccess {
		t.Fatalf("acquire sent to node %d, which does not master %q: %+v, want SUCCESS from the master", next.ID, key, r)
	}
	waiter := tc.masterConn("ns", key, 2)
	wait := &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Weight: 1, TTLMs: 60000, MaxWaitMs: wire.WaitForever, WaitID: 9}
	if w := waiter.callMaster(wire.TypeAcquire, wait); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", w)
	}

	// Every node prefers next for the group: the master hands it over.
	for _, s := range tc.nodes {
		s.svc.Group(g).SetPreferred(paxos.NodeID(next.ID))
	}
	waitFor(t, "the group handed to node "+fmt.Sprint(next.ID), func() bool { return tc.nodes[(mi+1)%3].svc.Group(g).Serving() })
	// A lease that lapses on a loaded machine may move the group again:
	// whoever masters it answers.
	if rr := holder.callMaster(wire.TypeRelease, &wire.Release{Key: key, Owner: owner, Token: r.Token}); rr.Status != wire.StatusSuccess {
		t.Fatalf("release after the hand-off, sent to node %s, which no longer masters %q: %+v, want SUCCESS", master.Client, key, rr)
	}
	if gr := waiter.awaitGranted(wait); gr.Status != wire.StatusSuccess || gr.Token <= r.Token || gr.Owner != wait.Owner {
		t.Fatalf("the wait queued on node %s before the hand-off: %+v, want SUCCESS above token %d", master.Client, gr, r.Token)
	}
	if st := holder.callMaster(wire.TypeState, &wire.State{Key: key}); st.Holder != wait.Owner || st.QueueLen != 0 {
		t.Fatalf("state after the grant: %+v, want held by %v and no waiter left", st, wait.Owner)
	}
}
