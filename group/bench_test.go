package group

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

type nopWriter struct{}

func (nopWriter) Set(key, value []byte) {}
func (nopWriter) Delete(key []byte)     {}

// BenchmarkApply measures StateMachine.Apply on batches of encoded
// commands: a batch of acquires of distinct keys, then a batch releasing
// them, alternately (decoding included, writes discarded). One op is one
// batch; cmds/s counts commands.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{1, 64, 512} {
		b.Run(fmt.Sprint("batch=", n), func(b *testing.B) {
			sm := NewStateMachine(8)
			acq := make([][]byte, n)
			rel := make([][]byte, n)
			const acqInst, relInst = 1, 2 // the release names the acquire's token
			for i := range n {
				key := fullKey("bench", fmt.Sprint("key-", i))
				o := wire.Owner{Client: 42, ID: uint64(i)}
				acq[i] = appendCommand(nil, &command{op: opAcquire, key: key, owner: o, ttlMs: 30000})
				rel[i] = appendCommand(nil, &command{op: opRelease, key: key, owner: o, token: acqInst})
			}
			res := make([]any, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					sm.Apply(acqInst, acq, nopWriter{}, res)
				} else {
					sm.Apply(relInst, rel, nopWriter{}, res)
				}
			}
			b.StopTimer()
			if st := res[0].(*outcome).status; st != wire.StatusSuccess {
				b.Fatalf("last command: %v", st)
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
		})
	}
}

// benchSink delivers one outstanding response at a time to its client.
type benchSink struct{ ch chan wire.Response }

func (s *benchSink) Respond(_ uint64, r wire.Response) { s.ch <- r }
func (s *benchSink) Push(wire.Message)                 {}

// BenchmarkAcquireRelease15Groups: 64 goroutines doing acquire+release
// pairs on fresh keys through 15 groups × 3 replicas in one process (real
// Pebble, MemNetwork). One op is one pair; reports pairs/s and the
// latency of a pair at p50 and p99.
func BenchmarkAcquireRelease15Groups(b *testing.B) {
	const workers = 64
	c := newCluster(b, 3, Config{})
	var next atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Value
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sink := &benchSink{ch: make(chan wire.Response, 1)}
			var masters [wire.DefaultGroups]*Service
			var mine []time.Duration
			do := func(r *Request) wire.Response {
				g := wire.GroupOf(r.Hash, c.groups)
				for {
					if masters[g] == nil {
						_, masters[g] = c.groupMaster(ID(g))
					}
					r.Sink = sink
					masters[g].Submit(r)
					resp := <-sink.ch
					if resp.Status != wire.StatusNoMaster {
						return resp
					}
					masters[g] = nil
				}
			}
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				key := fmt.Sprint("w", w, "-", i)
				h := wire.KeyHash("ns", key)
				o := wire.Owner{Client: uint64(w + 1), ID: 1}
				start := time.Now()
				a := do(&Request{Op: OpAcquire, Namespace: "ns", Key: key, Hash: h, Owner: o, TTL: 30 * time.Second})
				if a.Status != wire.StatusSuccess {
					failed.Store(fmt.Sprintf("acquire: %+v", a))
					return
				}
				r := do(&Request{Op: OpRelease, Namespace: "ns", Key: key, Hash: h, Owner: o, Token: a.Token})
				if r.Status != wire.StatusSuccess {
					failed.Store(fmt.Sprintf("release: %+v", r))
					return
				}
				mine = append(mine, time.Since(start))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// lastSink keeps the last answer it was given.
type lastSink struct{ last wire.Response }

func (s *lastSink) Respond(_ uint64, r wire.Response) { s.last = r }
func (s *lastSink) Push(wire.Message)                 {}

// BenchmarkRequestPath measures requests the master's worker decides from
// a key's record, on one worker over auto-chosen fake consensus (no
// store, no network), against a key read-held by 1 or 256 readers with
// values of wire.MaxValueLen bytes: State (answered from the record),
// try-lock (a write try-lock answered LOCK_OCCUPIED, no proposal), renew
// (of one reader: the decision, the proposal and its apply), and pair
// (acquire+release of a free key, the uncontended hot path; one op is
// the pair). B/op and allocs/op include the request and its answer.
func BenchmarkRequestPath(b *testing.B) {
	val := strings.Repeat("v", wire.MaxValueLen)
	for _, readers := range []int{1, 256} {
		r := newWorkerRig(b)
		r.fg.auto = true
		r.master(true)
		s := &lastSink{}
		tokens := make([]uint64, readers)
		for i := range readers {
			r.request(Request{Op: OpAcquire, Key: "k", Kind: wire.KindRead, Owner: owner(1, uint64(i+1)), TTL: time.Hour, Value: val, Sink: s})
			if s.last.Status != wire.StatusSuccess {
				b.Fatalf("reader %d: %+v", i, s.last)
			}
			tokens[i] = s.last.Token
		}
		run := func(name string, req Request, want wire.Status) {
			b.Run(fmt.Sprintf("%s/readers=%d", name, readers), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					r.request(req)
				}
				if s.last.Status != want {
					b.Fatalf("answered %+v, want %v", s.last, want)
				}
			})
		}
		run("state", Request{Op: OpState, Key: "k", Owner: owner(2, 1), Sink: s}, wire.StatusSuccess)
		run("trylock", Request{Op: OpAcquire, Key: "k", Kind: wire.KindWrite, Owner: owner(2, 1), TTL: time.Minute, Sink: s}, wire.StatusLockOccupied)
		last := owner(1, uint64(readers))
		run("renew", Request{Op: OpRenew, Key: "k", Owner: last, Token: tokens[readers-1], TTL: time.Hour, Sink: s}, wire.StatusSuccess)
	}
	b.Run("pair", func(b *testing.B) {
		r := newWorkerRig(b)
		r.fg.auto = true
		r.master(true)
		s := &lastSink{}
		o := owner(3, 1)
		b.ReportAllocs()
		for b.Loop() {
			r.request(Request{Op: OpAcquire, Key: "free", Owner: o, TTL: time.Minute, Sink: s})
			if s.last.Status != wire.StatusSuccess {
				b.Fatalf("acquire: %+v", s.last)
			}
			r.request(Request{Op: OpRelease, Key: "free", Owner: o, Token: s.last.Token, Sink: s})
			if s.last.Status != wire.StatusSuccess {
				b.Fatalf("release: %+v", s.last)
			}
		}
	})
}
