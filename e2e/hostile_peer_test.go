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

// hostilePeer connects to addr's peer port claiming to be node from (no
// TLS: the cluster's peers run without it, so reaching the port is
// enough) and sends msgs.
func hostilePeer(t *testing.T, addr string, from paxos.NodeID, msgs []paxos.Message) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
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
	time.Sleep(time.Second) // let the node read them before the close
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
// claims to be node 2 cannot stall, brick or wipe any group: it sends an
// Accept with ballot round MaxUint64 (group gA), an entry at instance
// MaxUint64 (gB), an Accept whose ballot names node 3 (gC), and chunk 0,
// the last, of a snapshot nobody asked for (gD, a group node 1 masters);
// none of them the namespace table's group, which the checks need.
// Then, and again after node 1 restarts, a client of node 1 alone takes
// and releases a lock in every one of the 15 groups, every node is ready,
// and the lock taken in each group before the attack is still held with
// its token and value.
func TestHostilePeer(t *testing.T) {
	c := hostileSetup(t)
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
	gs := nodeGroups(t, p)
	gD := -1
	for _, g := range gs {
		// Not the namespace table's group: the checks' clients need it.
		if g.Serving && g.Group != group.NamespaceGroup {
			gD = g.Group
			break
		}
	}
	if gD < 0 {
		gD = 4
	}
	var rest []int
	for g := range 15 {
		if g != gD && g != group.NamespaceGroup {
			rest = append(rest, g)
		}
	}
	gA, gB, gC := rest[0], rest[1], rest[2]
	applied := func(g int) uint64 {
		i := slices.IndexFunc(gs, func(s groupStatus) bool { return s.Group == g })
		return gs[i].Applied
	}
	rid := group.ReplicationID
	plausible := paxos.Ballot{Round: hostileRound, Node: 2}
	attack := []paxos.Message{
		{Type: paxos.MsgAccept, Group: rid(gA), From: 2, To: 1, Ballot: paxos.Ballot{Round: math.MaxUint64, Node: 2}},
		{Type: paxos.MsgAccept, Group: rid(gB), From: 2, To: 1, Ballot: plausible,
			Entries: []paxos.Entry{{Instance: math.MaxUint64, Ballot: plausible, Value: paxos.Value{Origin: plausible, Seq: 1}}}},
		{Type: paxos.MsgAccept, Group: rid(gC), From: 2, To: 1, Ballot: paxos.Ballot{Round: hostileRound, Node: 3},
			Entries: []paxos.Entry{{Instance: applied(gC) + 1, Ballot: paxos.Ballot{Round: hostileRound, Node: 3}, Value: paxos.Value{Origin: paxos.Ballot{Round: hostileRound, Node: 3}, Seq: 1}}}},
		{Type: paxos.MsgSnapshot, Group: rid(gD), From: 2, To: 1, Instance: applied(gD) + 1, ChunkSeq: 0, LastChunk: true},
	}
	t.Logf("attacking node 1: MaxUint64 ballot in group %d, instance MaxUint64 in group %d, node 3's ballot from node 2 in group %d, unrequested snapshot in group %d (mastered by node 1: %v)",
		gA, gB, gC, gD, gs[slices.IndexFunc(gs, func(s groupStatus) bool { return s.Group == gD })].Serving)
	hostilePeer(t, peerAddr(t, p), 2, attack)

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
