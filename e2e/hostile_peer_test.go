package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// hostileRound is the ballot round of the hostile peer's plausible
// ballots: above what a fresh cluster's elections reach, far below an
// absurd jump.
const hostileRound = 100

// hostilePeerHandshakeVersion is paxos/tcpnet's handshake version.
const hostilePeerHandshakeVersion = 2

// peerAddr is node p's peer address, from its configuration.
func peerAddr(t *testing.T, p *proc) string {
	t.Helper()
	b, err := os.ReadFile(p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct{ Nodes []nodeAddrs }
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, n := range cfg.Nodes {
		if n.ID == p.id {
			return n.Peer
		}
	}
	t.Fatalf("node %d not in its own configuration", p.id)
	return ""
}

// groupStatus is one group of a node's /status.
type groupStatus struct {
	Group   int    `json:"group"`
	Serving bool   `json:"serving"`
	Applied uint64 `json:"applied"`
}

func nodeGroups(t *testing.T, p *proc) []groupStatus {
	t.Helper()
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + p.admin + "/status")
	if err != nil {
		t.Fatalf("status of node %d: %v", p.id, err)
	}
	defer resp.Body.Close()
	var st struct{ Groups []groupStatus }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Groups
}

// peerDialer opens a connection to a node's peer port at addr: plain
// TCP, or TLS with some node's certificate.
type peerDialer func(t *testing.T, addr string) net.Conn

// plainPeer dials addr without TLS: on a cluster whose peers run
// without it (CLUSTER_SECURE=0), reaching the port is enough.
func plainPeer(t *testing.T, addr string) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// hostilePeer sends, on a connection to a node's peer port, the
// handshake claiming to be node from and msgs.
func hostilePeer(t *testing.T, nc net.Conn, from paxos.NodeID, msgs []paxos.Message) {
	t.Helper()
	hello := append([]byte{0, 0, 0, 0}, "PXLK"...)
	hello = append(hello, hostilePeerHandshakeVersion)
	hello = binary.AppendUvarint(hello, uint64(from))
	binary.BigEndian.PutUint32(hello, uint32(len(hello)-4))
	out := hello
	for i := range msgs {
		start := len(out)
		out = append(out, 0, 0, 0, 0)
		out = paxos.AppendMessage(out, &msgs[i])
		binary.BigEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	}
	_ = nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(out); err != nil {
		t.Fatalf("hostile peer: write: %v", err)
	}
}

// refusedPeerMessages is node p's paxlock_peer_messages_refused_total
// for reason (-1: absent).
func refusedPeerMessages(t *testing.T, p *proc, reason string) float64 {
	t.Helper()
	return metric(t, p, `paxlock_peer_messages_refused_total{reason="`+reason+`"}`)
}

// everyGroupServes takes and releases a fresh key in each of the 15
// groups, in parallel, with a client that knows only node p, and returns
// the groups that failed with why.
func everyGroupServes(ctx context.Context, c *cluster, p *proc, round string) map[int]error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cl, err := client.New(ctx, client.Config{Registry: []string{p.addr}, Namespace: "e2e", Secret: "s", Logger: quiet})
	if err != nil {
		return map[int]error{-1: err}
	}
	defer cl.Close()
	keys := keysPerGroup("e2e", 1)
	var mu sync.Mutex
	failed := map[int]error{}
	var wg sync.WaitGroup
	for g := range 15 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			m := cl.Mutex(keys[g][0]+"-"+round, client.TTL(5*time.Second))
			err := m.Lock(lctx)
			if err == nil {
				err = m.Unlock(lctx)
			}
			if err != nil {
				mu.Lock()
				failed[g] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return failed
}

// TestHostilePeer proves that a peer that reaches node 1's peer port and
// claims to be node 2 cannot stall, brick or wipe any group, on a
// cluster whose peers run without TLS (hostilePeerAttack).
func TestHostilePeer(t *testing.T) {
	hostilePeerAttack(t, hostileSetup(t), plainPeer)
}

// hostilePeerAttack has a peer that dial connects to node 1's peer port
// and claims to be node 2: it sends an Accept with ballot round MaxUint64
// (group gA), an entry at instance MaxUint64 (gB), an Accept whose ballot
// names node 3 (gC), and chunk 0, the last, of a snapshot nobody asked
// for (gD, a group node 1 masters); none of them the namespace table's
// group, which the checks need. Node 1's /metrics counts each refusal by
// its reason (paxlock_peer_messages_refused_total) before the connection
// closes. Then, and again after node 1 restarts, a client of node 1 alone
// takes and releases a lock in every one of the 15 groups, every node is
// ready, and the lock taken in each group before the attack is still
// held with its token and value.
func hostilePeerAttack(t *testing.T, c *cluster, dial peerDialer) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	holder := c.newClient(ctx)
	defer holder.Close()
	keys := keysPerGroup("e2e", 1)
	var held [15]*client.Mutex
	for g := range 15 {
		held[g] = holder.Mutex(keys[g][0], client.TTL(30*time.Second), client.AutoRenew(), client.Value(fmt.Sprintf("before-%d", g)))
		if err := held[g].Lock(ctx); err != nil {
			t.Fatalf("group %d: lock before the attack: %v", g, err)
		}
	}
	p := c.procs[0]
	gA, gB, gC, gD, attack := hostileMessages(t, p)
	t.Logf("attacking node 1: MaxUint64 ballot in group %d, instance MaxUint64 in group %d, node 3's ballot from node 2 in group %d, unrequested snapshot in group %d",
		gA, gB, gC, gD)
	nc := dial(t, peerAddr(t, p))
	hostilePeer(t, nc, 2, attack)
	reasons := []string{"round_jump", "instance_ahead", "foreign_ballot", "unrequested_snapshot"}
	c.waitUntil("node 1 to count each hostile message refused", time.Minute, func() bool {
		for _, r := range reasons {
			if refusedPeerMessages(t, p, r) < 1 {
				return false
			}
		}
		return true
	})
	for _, r := range reasons {
		t.Logf("node 1: paxlock_peer_messages_refused_total{reason=%q} %v", r, refusedPeerMessages(t, p, r))
	}
	nc.Close()

	check := func(stage string) {
		t.Helper()
		start := time.Now()
		for g, err := range everyGroupServes(ctx, c, p, stage) {
			t.Errorf("%s: group %d makes no progress through a client of node 1: %v", stage, g, err)
		}
		for _, q := range c.procs {
			ok := false
			for time.Since(start) < 30*time.Second && !ok {
				ok = readyz(http.DefaultClient, q) == http.StatusOK
				if !ok {
					time.Sleep(200 * time.Millisecond)
				}
			}
			if !ok {
				t.Errorf("%s: node %d not ready 30 s on", stage, q.id)
			}
		}
		other := c.newClient(ctx)
		defer other.Close()
		for g := range 15 {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := other.State(sctx, keys[g][0])
			cancel()
			want := fmt.Sprintf("before-%d", g)
			if err != nil || !st.Held || st.Token != held[g].Token() || st.Value != want {
				t.Errorf("%s: group %d: the lock taken before the attack reads %+v (err %v), want held with token %d and value %q", stage, g, st, err, held[g].Token(), want)
			}
		}
		t.Logf("%s: checked in %v", stage, time.Since(start).Round(time.Millisecond))
	}
	check("after the attack")
	c.kill(p)
	c.start(p)
	restarted := time.Now()
	for !getViewServed(p.addr, time.Second) && time.Since(restarted) < 30*time.Second {
		time.Sleep(200 * time.Millisecond)
	}
	check("after node 1 restarted")
}

// hostileMessages picks the groups hostilePeerAttack attacks on node p
// (gD one p masters, if any) and builds the messages, from node 2.
func hostileMessages(t *testing.T, p *proc) (gA, gB, gC, gD int, attack []paxos.Message) {
	t.Helper()
	gs := nodeGroups(t, p)
	gD = -1
	for _, g := range gs {
		// Not the namespace table's group: the checks' clients need it.
		if g.Serving && g.Group != int(group.NamespaceGroup) {
			gD = g.Group
			break
		}
	}
	if gD < 0 {
		gD = 4
	}
	var rest []int
	for g := range 15 {
		if g != gD && g != int(group.NamespaceGroup) {
			rest = append(rest, g)
		}
	}
	gA, gB, gC = rest[0], rest[1], rest[2]
	applied := func(g int) uint64 {
		i := slices.IndexFunc(gs, func(s groupStatus) bool { return s.Group == g })
		return gs[i].Applied
	}
	rid := func(g int) paxos.GroupID { return group.ID(g).ReplicaGroup() }
	plausible := paxos.Ballot{Round: hostileRound, Node: 2}
	attack = []paxos.Message{
		{Type: paxos.MsgAccept, Group: rid(gA), From: 2, To: 1, Ballot: paxos.Ballot{Round: math.MaxUint64, Node: 2}},
		{Type: paxos.MsgAccept, Group: rid(gB), From: 2, To: 1, Ballot: plausible,
			Entries: []paxos.Entry{{Instance: math.MaxUint64, Ballot: plausible, Value: paxos.Value{Origin: plausible, Seq: 1}}}},
		{Type: paxos.MsgAccept, Group: rid(gC), From: 2, To: 1, Ballot: paxos.Ballot{Round: hostileRound, Node: 3},
			Entries: []paxos.Entry{{Instance: applied(gC) + 1, Ballot: paxos.Ballot{Round: hostileRound, Node: 3}, Value: paxos.Value{Origin: paxos.Ballot{Round: hostileRound, Node: 3}, Seq: 1}}}},
		// Ahead of what the holders' renewals apply meanwhile, so that
		// it is a snapshot to refuse, not one already applied.
		{Type: paxos.MsgSnapshot, Group: rid(gD), From: 2, To: 1, Instance: applied(gD) + 1000, ChunkSeq: 0, LastChunk: true},
	}
	return gA, gB, gC, gD, attack
}
