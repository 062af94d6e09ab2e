package server

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/scramauth"
	"github.com/paxlock/paxlock/client/wire"
)

// systemMaster returns the node serving group 0, which changes the
// namespace table.
func (tc *testCluster) systemMaster() *Server {
	tc.t.Helper()
	var m *Server
	waitFor(tc.t, "a master of group 0", func() bool {
		for _, s := range tc.nodes {
			if s != nil && s.svc.Group(0).Serving() {
				m = s
				return true
			}
		}
		return false
	})
	return m
}

// changeNamespace puts (secret != "") or deletes namespace ns through
// the master of group 0 and waits until every node has applied it.
func (tc *testCluster) changeNamespace(ns, secret string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitFor(tc.t, "configured namespaces installed", func() bool { return tc.systemMaster().svc.NamespacesInitialised() })
	var err error
	if secret == "" {
		err = tc.systemMaster().svc.DeleteNamespace(ctx, ns)
	} else {
		err = tc.systemMaster().svc.PutNamespace(ctx, ns, secret)
	}
	if err != nil {
		tc.t.Fatalf("namespace %s: %v", ns, err)
	}
	for _, s := range tc.nodes {
		waitFor(tc.t, "the change applied on every node", func() bool { return s.svc.HasNamespace(ns) == (secret != "") })
	}
}

// ended reads r until its connection ends, and returns the pushes it got
// first. It fails the test if the connection stays open (rawConn's read
// deadline, 30s).
func (r *rawConn) ended(what string) []wire.Message {
	r.t.Helper()
	var pushes []wire.Message
	for {
		f, m, err := r.read()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				r.t.Fatalf("%s: the connection stayed open", what)
			}
			return pushes
		}
		if f.ReqID == 0 {
			pushes = append(pushes, m)
		}
	}
}

// TestNamespaceRevocation removes a namespace, then changes another's
// secret: the sessions authenticated under them end on every node (each
// node closes them at its first tick after it applied the change); a
// holder is told its lock is revoked and a waiter that its wait failed;
// sessions of other namespaces are untouched, and the old secret is
// refused.
func TestNamespaceRevocation(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	tc.changeNamespace("tenant", "pw")
	const key = "revoked"
	mi := tc.masterIndex("tenant", key)
	master := tc.nodes[mi].cfg.self().Client

	holder := dialRaw(t, master)
	if r := holder.hello("tenant", "pw", 1); r.Status != wire.StatusSuccess {
		t.Fatalf("hello: %+v", r)
	}
	owner := wire.Owner{Client: cid(1), ID: 1}
	acq := holder.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: owner, Weight: 1, TTLMs: 60000})
	if acq.Status != wire.StatusSuccess {
		t.Fatalf("acquire: %+v", acq)
	}
	waiter := dialRaw(t, master)
	waiter.hello("tenant", "pw", 2)
	if w := waiter.callMaster(wire.TypeAcquire, &wire.Acquire{Key: key, Owner: wire.Owner{Client: cid(2), ID: 1}, Weight: 1,
		MaxWaitMs: wire.WaitForever, WaitID: 77}); w.Status != wire.StatusLockWait {
		t.Fatalf("blocking acquire: %+v", w)
	}
	var idle []*rawConn
	for _, s := range tc.nodes {
		rc := dialRaw(t, s.cfg.self().Client)
		if r := rc.hello("tenant", "pw", 3); r.Status != wire.StatusSuccess {
			t.Fatalf("hello to node %d: %+v", s.cfg.NodeID, r)
		}
		idle = append(idle, rc)
	}
	bystander := dialRaw(t, master)
	bystander.hello("ns", "s3cret", 4)
	// The Go client surfaces it: a held Mutex's Lost closes, and the
	// client's later calls fail with ErrAuth.
	ctx := ctxT(t)
	gc, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "tenant", Secret: "pw", Logger: testLogger(), MaxRetries: testMaxRetries})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	m := gc.Mutex("revoked-by-client")
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("Lock: %v", err)
	}

	tc.changeNamespace("tenant", "")
	var lost *wire.Lost
	for _, m := range holder.ended("holder") {
		if l, ok := m.(*wire.Lost); ok {
			lost = l
		}
	}
	if lost == nil || lost.Key != key || lost.Token != acq.Token || lost.Owner != owner || lost.Event != wire.EventRevoked {
		t.Errorf("holder was told %+v, want Lost revoked for %s token %d", lost, key, acq.Token)
	}
	var granted *wire.Granted
	for _, m := range waiter.ended("waiter") {
		if g, ok := m.(*wire.Granted); ok {
			granted = g
		}
	}
	if granted == nil || granted.WaitID != 77 || granted.Status != wire.StatusAuthFailed {
		t.Errorf("waiter was told %+v, want Granted AUTH_FAILED for wait 77", granted)
	}
	for i, rc := range idle {
		rc.ended("idle session on node " + string(rune('1'+i)))
	}
	if r := bystander.call(wire.TypeState, &wire.State{Key: key}); r.Status == wire.StatusAuthFailed {
		t.Fatalf("another namespace's session: %+v", r)
	}
	select {
	case <-m.Lost():
	case <-ctx.Done():
		t.Fatal("the client's Lost did not close")
	}
	if err := gc.Mutex("after").TryLock(ctx); !errors.Is(err, client.ErrAuth) {
		t.Fatalf("TryLock after the namespace was removed: %v, want ErrAuth", err)
	}

	// A changed secret: sessions that said the old one end everywhere,
	// the old secret is refused and the new one accepted.
	tc.changeNamespace("tenant2", "old")
	idle = idle[:0]
	for _, s := range tc.nodes {
		rc := dialRaw(t, s.cfg.self().Client)
		if r := rc.hello("tenant2", "old", 5); r.Status != wire.StatusSuccess {
			t.Fatalf("hello to node %d: %+v", s.cfg.NodeID, r)
		}
		idle = append(idle, rc)
	}
	var oldV []scramauth.Verifier
	for _, s := range tc.nodes {
		v, _ := s.credentials("tenant2")
		oldV = append(oldV, v)
	}
	tc.changeNamespace("tenant2", "new")
	for i, s := range tc.nodes {
		// changeNamespace waited for the namespace to exist; the new
		// secret's verifier is applied with it.
		waitFor(t, "the new secret applied", func() bool { v, ok := s.credentials("tenant2"); return ok && !v.Equal(oldV[i]) })
	}
	for i, rc := range idle {
		rc.ended("session with the old secret on node " + string(rune('1'+i)))
	}
	for _, s := range tc.nodes {
		rc := dialRaw(t, s.cfg.self().Client)
		if r := rc.hello("tenant2", "old", 5); r.Status != wire.StatusAuthFailed {
			t.Fatalf("old secret at node %d: %+v", s.cfg.NodeID, r)
		}
		if r := rc.hello("tenant2", "new", 5); r.Status != wire.StatusSuccess {
			t.Fatalf("new secret at node %d: %+v", s.cfg.NodeID, r)
		}
	}
	if r := bystander.call(wire.TypeState, &wire.State{Key: key}); r.Status == wire.StatusAuthFailed {
		t.Fatalf("another namespace's session after a secret change: %+v", r)
	}
}
