package group

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/internal/testutil"
)

// checkNSIndex checks that sm's per-namespace counts and its shards'
// namespace index agree with its lock table: every held key is indexed
// under its namespace, in order, nothing else is, no namespace keeps an
// empty tree, and each namespace's keys and holders are what it counts.
func checkNSIndex(t *testing.T, where string, sm *StateMachine) {
	t.Helper()
	want := map[string]nsUse{}
	for i := range sm.shards {
		s := &sm.shards[i]
		s.mu.RLock()
		byNS := map[string][]string{}
		for k, l := range s.locks {
			ns, _ := splitFull(k)
			byNS[ns] = append(byNS[ns], k)
			u := want[ns]
			u.keys++
			u.holders += int64(l.n())
			want[ns] = u
		}
		if len(s.nsKeys) != len(byNS) {
			t.Fatalf("%s: shard %d indexes %d namespaces, holds keys of %d", where, i, len(s.nsKeys), len(byNS))
		}
		for ns, keys := range byNS {
			slices.Sort(keys)
			if got := s.nsKeysOf(ns); !slices.Equal(got, keys) {
				t.Fatalf("%s: shard %d indexes %d keys of %q, holds %d", where, i, len(got), ns, len(keys))
			}
		}
		s.mu.RUnlock()
	}
	sm.mu.Lock()
	got := maps.Clone(sm.nsHeld)
	sm.mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("%s: counts %v, table holds %v", where, got, want)
	}
	for ns, u := range want {
		if got[ns] != u {
			t.Fatalf("%s: namespace %q counted %+v, table holds %+v", where, ns, got[ns], u)
		}
	}
}

// fillSM applies an exclusive acquire of each of keys in namespace ns.
func fillSM(sm *StateMachine, inst *uint64, ns string, keys []string) {
	res := make([]any, 1)
	for i, k := range keys {
		*inst++
		c := command{op: opAcquire, key: fullKey(ns, k), owner: owner(1, uint64(i+1)), kind: wire.KindExclusive, ttlMs: 60000}
		sm.Apply(*inst, [][]byte{appendCommand(nil, &c)}, discard{}, res)
	}
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%06d", prefix, i)
	}
	return out
}

// TestListScansOnlyItsNamespace: listing a namespace of 10 keys beside
// one of 20,000 in the same group visits its 10 keys and nothing else (the
// count the rate is charged by), a page of 10 of the large one visits at
// most 10 keys a shard, and a namespace's dropped records leave the index
// and counts exact.
func TestListScansOnlyItsNamespace(t *testing.T) {
	t.Parallel()
	sm := NewStateMachine(4)
	var inst uint64
	fillSM(sm, &inst, "big", names("k", 20000))
	fillSM(sm, &inst, "small", names("k", 10))
	list := func(ns, prefix, after string, limit int) (keys []string, scanned int) {
		for i := range sm.shards {
			ks, n := sm.listKeys(i, ns, prefix, after, limit)
			if n > limit+1 {
				t.Fatalf("shard %d visited %d keys for a page of %d", i, n, limit)
			}
			keys = append(keys, ks...)
			scanned += n
		}
		slices.Sort(keys)
		return keys, scanned
	}
	keys, scanned := list("small", "", "", wire.MaxListLimit)
	if len(keys) != 10 || scanned != 10 {
		t.Fatalf("small: %d keys, %d visited; want 10 and 10", len(keys), scanned)
	}
	if _, scanned := list("big", "", "", 10); scanned > 10*len(sm.shards) {
		t.Fatalf("a page of 10 of the large namespace visited %d keys", scanned)
	}
	var tail []string
	for i := 19951; i < 20000; i++ {
		tail = append(tail, fullKey("big", fmt.Sprintf("k%06d", i)))
	}
	if keys, _ := list("big", "k0199", "k019950", 1000); !slices.Equal(keys, tail) {
		t.Fatalf("prefix k0199 after k019950: %d keys %v", len(keys), keys)
	}
	checkNSIndex(t, "filled", sm)
	sm.mu.Lock()
	sm.dropRecords("big")
	sm.mu.Unlock()
	checkNSIndex(t, "big dropped", sm)
	if keys, _ := list("big", "", "", 10); len(keys) != 0 {
		t.Fatalf("dropped namespace lists %d keys", len(keys))
	}
}

// TestListChargesThePage: a List is charged by the keys it visits, so a
// page of 10 keys of a namespace holding 600 costs one request, not six
// (the namespace's matching keys): with a rate of 1/s and a burst of 1, a
// state query two seconds after it passes.
func TestListChargesThePage(t *testing.T) {
	t.Parallel()
	fc := newFakeClock()
	c := newFakeCluster(t, 1, Config{Clock: fc})
	s := newSink()
	keys := keysInGroup(c.groups, "ns", 600)
	for i, k := range keys {
		if r := c.do(s, Request{Op: OpAcquire, Namespace: "ns", Key: k, Owner: owner(1, uint64(i+1)), TTL: time.Hour}); r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %+v", k, r)
		}
	}
	_, sys := c.groupMaster(NamespaceGroup)
	if err := sys.PutNamespace(t.Context(), "ns", "pw"); err != nil {
		t.Fatal(err)
	}
	q := Quota{Rate: 1, Burst: 1}
	if err := sys.PutQuota(t.Context(), "ns", q); err != nil {
		t.Fatal(err)
	}
	svc := c.svc(1)
	testutil.Eventually(t, 10*time.Second, func() bool { return svc.QuotaUsage()["ns"].Quota == q }, "the quota to be enforced")
	fc.Advance(time.Minute)
	got := make(chan wire.Response, 1)
	svc.List("ns", Of(wire.KeyHash("ns", keys[0]), c.groups), "", "", 10, func(r wire.Response) { got <- r })
	if r := <-got; r.Status != wire.StatusSuccess || len(r.Locks) != 10 {
		t.Fatalf("list: %s, %d locks; want 10", r.Status, len(r.Locks))
	}
	fc.Advance(2 * time.Second)
	if r := c.do(s, Request{Op: OpState, Namespace: "ns", Key: keys[0]}); r.Status != wire.StatusSuccess {
		t.Fatalf("a state query two seconds after a page of 10: %+v", r)
	}
}

// TestListPagingStable: paging a namespace with the last key as cursor,
// while keys are taken and freed between pages, lists every key held
// throughout exactly once and no key twice.
func TestListPagingStable(t *testing.T) {
	t.Parallel()
	c := newFakeCluster(t, 1, Config{})
	s := newSink()
	all := keysInGroup(c.groups, "ns", 400)
	g := wire.GroupOf(wire.KeyHash("ns", all[0]), c.groups)
	var stable, churn []string
	for i, k := range all {
		if i%2 == 0 {
			stable = append(stable, k)
		} else {
			churn = append(churn, k)
		}
	}
	toks := map[string]uint64{}
	take := func(k string) {
		r := c.do(s, Request{Op: OpAcquire, Namespace: "ns", Key: k, Owner: owner(1, 1), TTL: time.Hour})
		if r.Status != wire.StatusSuccess {
			t.Fatalf("acquire %s: %+v", k, r)
		}
		toks[k] = r.Token
	}
	for _, k := range stable {
		take(k)
	}
	for _, k := range churn[:100] {
		take(k)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	svc := c.svc(1)
	seen := map[string]int{}
	pages := 0
	for after := ""; ; pages++ {
		got := make(chan wire.Response, 1)
		svc.List("ns", ID(g), "", after, 7, func(r wire.Response) { got <- r })
		r := <-got
		if r.Status != wire.StatusSuccess {
			t.Fatalf("page %d: %+v", pages, r)
		}
		if len(r.Locks) == 0 {
			break
		}
		for _, l := range r.Locks {
			seen[l.Key]++
		}
		after = r.Locks[len(r.Locks)-1].Key
		for range 5 { // take or free churn keys on both sides of the cursor
			k := churn[rng.IntN(len(churn))]
			if tok, ok := toks[k]; ok {
				if r := c.do(s, Request{Op: OpRelease, Namespace: "ns", Key: k, Owner: owner(1, 1), Token: tok}); r.Status != wire.StatusSuccess {
					t.Fatalf("release %s: %+v", k, r)
				}
				delete(toks, k)
			} else {
				take(k)
			}
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", k, n)
		}
	}
	for _, k := range stable {
		if seen[k] != 1 {
			t.Fatalf("stable key %s listed %d times", k, seen[k])
		}
	}
	if pages < 20 {
		t.Fatalf("%d pages", pages)
	}
	for _, id := range c.peers {
		checkNSIndex(t, "after paging", c.svc(id).Group(ID(g)).StateMachine())
	}
}

// BenchmarkNSIndexMemory reports the heap the namespace index adds per
// held key (bytes/key), for keys indexed in random order (apply) and in
// key order (Load reads the keyspace in order), over 8 shards: run with
// -benchtime=1x.
func BenchmarkNSIndexMemory(b *testing.B) {
	const n = 1 << 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fullKey(fmt.Sprintf("ns%d", i%4), fmt.Sprintf("lock/%08d", i))
	}
	slices.Sort(keys)
	for _, order := range []string{"random", "sorted", "reversed"} {
		b.Run(order, func(b *testing.B) {
			ks := slices.Clone(keys)
			switch order {
			case "random":
				rand.New(rand.NewPCG(3, 4)).Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
			case "reversed":
				slices.Reverse(ks)
			}
			for range b.N {
				shards := make([]shard, 8)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for _, k := range ks {
					shards[wire.WorkerOf(hashFull(k), len(shards))].index(k)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/key")
				runtime.KeepAlive(shards)
			}
		})
	}
}

// BenchmarkNSIndexChurn measures an index insert and delete (a key taken
// and freed) beside 128k indexed keys of the namespace.
func BenchmarkNSIndexChurn(b *testing.B) {
	var s shard
	for i := range 1 << 17 {
		s.index(fullKey("ns", fmt.Sprintf("lock/%08d", i*2)))
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fullKey("ns", fmt.Sprintf("lock/%08d", rand.IntN(1<<18)|1))
	}
	b.ResetTimer()
	for i := range b.N {
		k := keys[i%len(keys)]
		s.index(k)
		s.unindex(k)
	}
}
