package group

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
)

// await waits (for at most d) until cond holds on the sink; unlike wait
// it may be called from any goroutine.
func (s *testSink) await(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		s.mu.Lock()
		ok := cond()
		s.mu.Unlock()
		if ok {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-s.signal:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// holdTracker judges mutual exclusion from what clients are told: a
// client claims a key when told it holds it and gives it up before it
// sends the release, so a second claim while one stands is a double grant
// (I1); tokens of successive claims must increase (I2).
type holdTracker struct {
	mu     sync.Mutex
	keys   map[string]*trackedKey
	errs   []string
	grants atomic.Int64
}

type trackedKey struct {
	holder uint64
	last   uint64
}

func (h *holdTracker) fail(format string, args ...any) {
	h.errs = append(h.errs, fmt.Sprintf(format, args...))
}

func (h *holdTracker) claim(key string, client, token uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := h.keys[key]
	if k == nil {
		k = &trackedKey{}
		h.keys[key] = k
	}
	if k.holder != 0 {
		h.fail("I1: %q granted to client %d (token %d) while client %d holds it", key, client, token, k.holder)
	}
	if token <= k.last {
		h.fail("I2: %q granted token %d after %d", key, token, k.last)
	}
	k.holder, k.last = client, token
	h.grants.Add(1)
}

func (h *holdTracker) unclaim(key string, client uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if k := h.keys[key]; k == nil || k.holder != client {
		h.fail("%q released by client %d, which does not hold it", key, client)
	} else {
		k.holder = 0
	}
}

// trafficClient is one client connection: it sends each request to the
// node serving the key's group and re-sends on NO_MASTER, as the real
// client does after refreshing its view.
type trafficClient struct {
	stats  *trafficStats
	c      *cluster
	id     uint64
	sink   *testSink
	waitID uint64
}

// trafficStats counts how often the master changes reached the clients.
type trafficStats struct {
	noMaster   atomic.Int64 // requests answered NO_MASTER or OVERLOADED
	waitsMoved atomic.Int64 // waits ended by Granted{NO_MASTER}
	waited     atomic.Int64 // blocking acquires that queued
}

var errNoAnswer = errors.New("no answer")

// call submits r to the key's current master and waits for the answer;
// resent says whether an earlier attempt was answered NO_MASTER (it may
// still have taken effect).
func (tc *trafficClient) call(r Request) (resp wire.Response, resent bool, err error) {
	r.Namespace = "ns"
	r.Hash = wire.KeyHash(r.Namespace, r.Key)
	r.Owner = owner(tc.id, 1)
	r.Sink = tc.sink
	g := wire.GroupOf(r.Hash, tc.c.groups)
	if werr := testutil.Wait(60*time.Second, func() bool {
		_, svc := tc.c.findMaster(ID(g))
		if svc == nil {
			return false
		}
		r.ReqID = tc.c.nextID()
		rr := r
		svc.Submit(&rr)
		if !tc.sink.await(30*time.Second, func() bool {
			var ok bool
			resp, ok = tc.sink.resps[rr.ReqID]
			return ok
		}) {
			err = fmt.Errorf("client %d: %v %q: %w", tc.id, r.Op, r.Key, errNoAnswer)
			return true
		}
		// Re-send as the client does: NO_MASTER and OVERLOADED changed
		// nothing; TIMEOUT (a replica stopped with the proposal in flight)
		// may have, and a re-send is safe either way.
		if resp.Status != wire.StatusNoMaster && resp.Status != wire.StatusOverloaded && resp.Status != wire.StatusTimeout {
			return true
		}
		resent = true
		tc.stats.noMaster.Add(1)
		return false
	}); werr != nil {
		return wire.Response{}, resent, fmt.Errorf("client %d: %v %q: no master: %w", tc.id, r.Op, r.Key, werr)
	}
	return resp, resent, err // err: the answer that never came, if any
}

// acquire takes key, blocking or as a try-lock; ok is false when a
// try-lock found it held.
func (tc *trafficClient) acquire(key string, blocking bool) (token uint64, ok bool, err error) {
	tc.waitID++
	wid := tc.waitID
	seen := 0 // Granted pushes of this wait already consumed
	maxWait := time.Duration(0)
	if blocking {
		maxWait = -1
	}
	for range 1000 {
		resp, _, err := tc.call(Request{Op: OpAcquire, Key: key, MaxWait: maxWait, WaitID: wid, TTL: time.Minute})
		if err != nil {
			return 0, false, err
		}
		switch resp.Status {
		case wire.StatusSuccess:
			return resp.Token, true, nil
		case wire.StatusLockOccupied:
			if blocking {
				return 0, false, fmt.Errorf("client %d: blocking acquire of %q: %v", tc.id, key, resp.Status)
			}
			return 0, false, nil
		case wire.StatusLockWait:
			tc.stats.waited.Add(1)
			var g *wire.Granted
			if !tc.sink.await(60*time.Second, func() bool {
				n := 0
				for _, m := range tc.sink.pushes {
					if x, ok := m.(*wire.Granted); ok && x.WaitID == wid {
						if n++; n > seen {
							g = x
							return true
						}
					}
				}
				return false
			}) {
				return 0, false, fmt.Errorf("client %d: wait %d for %q: %w", tc.id, wid, key, errNoAnswer)
			}
			seen++
			switch g.Status {
			case wire.StatusSuccess:
				return g.Token, true, nil
			case wire.StatusNoMaster:
				tc.stats.waitsMoved.Add(1)
				continue // re-send: call waits for the new master
			default:
				return 0, false, fmt.Errorf("client %d: granted %+v", tc.id, g)
			}
		default:
			return 0, false, fmt.Errorf("client %d: acquire %q: %+v", tc.id, key, resp)
		}
	}
	return 0, false, fmt.Errorf("client %d: acquire %q: too many retries", tc.id, key)
}

// finish renews or releases a hold; after a re-send the first attempt may
// have taken effect, so a release then may find the lock gone.
func (tc *trafficClient) finish(op Op, key string, token uint64) error {
	resp, resent, err := tc.call(Request{Op: op, Key: key, Token: token})
	if err != nil {
		return err
	}
	if resent && op == OpRelease && (resp.Status == wire.StatusLockDeleted || resp.Status == wire.StatusLockChangedOwner) {
		return nil
	}
	if resp.Status != wire.StatusSuccess || resp.Token != token {
		return fmt.Errorf("client %d: %v %q token %d: %+v", tc.id, op, key, token, resp)
	}
	return nil
}

// TestFifteenGroupsMasterChanges runs clients acquiring and releasing
// many keys of 15 groups × 3 replicas while group masters are transferred,
// a node is stopped and restarted: no key is ever granted to two clients
// at once, tokens increase per key, every request is answered, and the
// replicas end with identical lock tables with nothing held. An
// integration test on purpose (real Hosts and stores).
func TestFifteenGroupsMasterChanges(t *testing.T) {
	t.Parallel()
	clients, ops, nkeys := 8, 150, 30
	if testing.Short() {
		clients, ops = 6, 60
	}
	c := newCluster(t, 3, Config{Clock: newFakeClock()}) // nothing expires
	tr := &holdTracker{keys: map[string]*trackedKey{}}
	var keys []string
	for i := range nkeys {
		keys = append(keys, fmt.Sprint("key", i))
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	stats := &trafficStats{}
	for i := range clients {
		tc := &trafficClient{stats: stats, c: c, id: uint64(i + 1), sink: newSink()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(tc.id, 7))
			for range ops {
				key := keys[r.IntN(len(keys))]
				tok, ok, err := tc.acquire(key, r.IntN(2) == 0)
				if err != nil {
					errc <- err
					return
				}
				if ok {
					tr.claim(key, tc.id, tok)
					time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond) // the holder's work, not a wait: a hold that lasts
					if r.IntN(3) == 0 {
						if err := tc.finish(OpRenew, key, tok); err != nil {
							errc <- err
							return
						}
					}
					tr.unclaim(key, tc.id)
					if err := tc.finish(OpRelease, key, tok); err != nil {
						errc <- err
						return
					}
				}
				done.Add(1)
			}
		}()
	}
	total := int64(clients * ops)
	waitOps := func(frac float64) {
		for done.Load() < int64(frac*float64(total)) {
			select {
			case err := <-errc:
				t.Fatal(err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	// Master changes in the middle of the traffic: every group's master
	// transfers mastership to the next node, several times; later a node
	// stops and comes back (and the preferred masters take their groups back).
	transferAll := func() {
		for g := range c.groups {
			if id, svc := c.findMaster(ID(g)); svc != nil {
				if rep := c.replica(id, ID(g)); rep != nil {
					rep.TransferTo(c.peers[(int(id))%len(c.peers)])
				}
			}
		}
	}
	for f := 0.1; f < 0.42; f += 0.04 {
		waitOps(f)
		transferAll()
	}
	waitOps(0.45)
	c.stop(3)
	waitOps(0.7)
	c.start(3)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	tr.mu.Lock()
	for _, e := range tr.errs {
		t.Error(e)
	}
	tr.mu.Unlock()
	if t.Failed() {
		return
	}
	t.Logf("%d grants over %d keys; %d waits, %d moved by a master change; %d requests re-sent after NO_MASTER",
		tr.grants.Load(), nkeys, stats.waited.Load(), stats.waitsMoved.Load(), stats.noMaster.Load())
	checkReplicasAgree(t, c, true)
}

// checkReplicasAgree waits until every running replica of every group has
// applied the same instance and compares their lock tables.
func checkReplicasAgree(t *testing.T, c *cluster, empty bool) {
	t.Helper()
	for g := range c.groups {
		var applied []uint64
		var dumps []map[string]mLock
		var ids []paxos.NodeID
		err := testutil.Wait(60*time.Second, func() bool {
			applied, dumps, ids = nil, nil, nil
			for _, id := range c.peers {
				if svc := c.svc(id); svc != nil {
					_, a, _ := svc.Group(ID(g)).Consensus().Progress()
					applied = append(applied, a)
					dumps = append(dumps, dumpSM(svc.Group(ID(g)).StateMachine()))
					ids = append(ids, id)
				}
			}
			for i := range applied {
				if applied[i] != applied[0] || !reflect.DeepEqual(dumps[i], dumps[0]) {
					return false
				}
			}
			return true
		})
		if err != nil {
			t.Fatalf("%v waiting for group %d's replicas %v to agree: applied %v\n%v", err, g, ids, applied, dumps)
		}
		if empty && len(dumps[0]) != 0 {
			t.Fatalf("group %d: locks left held: %v", g, dumps[0])
		}
	}
}
