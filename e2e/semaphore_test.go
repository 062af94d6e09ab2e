package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/paxlock/paxlock/client"
)

// The semaphore model for porcupine, one partition per key: holders with
// permits, never more than Total in all when a grant is made. Holders
// granted in one grant share a token, so a grant's token may equal the
// last one while another holder has it; every other grant's token exceeds
// every earlier one. A hold whose release is unknown (or failed) is
// abandoned: it may have ended, or end at any time later.
type semHold struct {
	Owner     int
	Token     uint64
	Permits   int
	Abandoned bool
}

type semState struct {
	Holds []semHold // by owner
	Last  uint64
}

type semInput struct {
	Key     string
	Owner   int
	Acquire bool
	Permits int    // acquire: how many
	Total   int    // the semaphore's total
	Token   uint64 // release: the hold's token
}

func (s semState) find(owner int) int {
	return slices.IndexFunc(s.Holds, func(h semHold) bool { return h.Owner == owner })
}

func (s semState) without(i int) semState {
	return semState{Last: s.Last, Holds: slices.Delete(slices.Clone(s.Holds), i, i+1)}
}

// used counts the permits held, abandoned holds included or not.
func (s semState) used(abandoned bool) int {
	n := 0
	for _, h := range s.Holds {
		if abandoned || !h.Abandoned {
			n += h.Permits
		}
	}
	return n
}

// dropAbandoned returns s without its abandoned holds (they ended).
func (s semState) dropAbandoned() semState {
	out := semState{Last: s.Last}
	for _, h := range s.Holds {
		if !h.Abandoned {
			out.Holds = append(out.Holds, h)
		}
	}
	return out
}

func (s semState) with(h semHold) semState {
	out := semState{Last: max(s.Last, h.Token), Holds: slices.Clone(s.Holds)}
	i, _ := slices.BinarySearchFunc(out.Holds, h.Owner, func(x semHold, o int) int { return x.Owner - o })
	out.Holds = slices.Insert(out.Holds, i, h)
	return out
}

var semModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{semState{}} },
	Step: func(state, input, output any) []any {
		s := state.(semState)
		in := input.(semInput)
		out := output.(lockOutput)
		i := s.find(in.Owner)
		if in.Acquire {
			if !out.OK {
				return []any{s}
			}
			if i >= 0 {
				if !s.Holds[i].Abandoned {
					return nil // a handle holds one grant at a time
				}
				s = s.without(i)
			}
			shared := out.Token == s.Last && slices.ContainsFunc(s.Holds, func(h semHold) bool { return h.Token == s.Last })
			if out.Token <= s.Last && !shared {
				return nil
			}
			h := semHold{Owner: in.Owner, Token: out.Token, Permits: in.Permits}
			var next []any
			if s.used(true)+in.Permits <= in.Total {
				next = append(next, s.with(h))
			}
			if d := s.dropAbandoned(); len(d.Holds) < len(s.Holds) && d.used(false)+in.Permits <= in.Total {
				next = append(next, d.with(h))
			}
			return next
		}
		match := i >= 0 && s.Holds[i].Token == in.Token
		if out.Unknown || !out.OK {
			if match {
				ab := semState{Last: s.Last, Holds: slices.Clone(s.Holds)}
				ab.Holds[i].Abandoned = true
				return []any{s.without(i), ab}
			}
			return []any{s}
		}
		if match {
			return []any{s.without(i)}
		}
		return nil
	},
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partitionByKey(history, func(in any) string { return in.(semInput).Key })
	},
	Equal: func(a, b any) bool {
		x, y := a.(semState), b.(semState)
		return x.Last == y.Last && slices.Equal(x.Holds, y.Holds)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(semInput), output.(lockOutput)
		if in.Acquire {
			return fmt.Sprintf("acquire(%s, o%d, %d of %d) -> ok=%v t=%d", in.Key, in.Owner, in.Permits, in.Total, out.OK, out.Token)
		}
		return fmt.Sprintf("release(%s, o%d, t%d) -> ok=%v unknown=%v", in.Key, in.Owner, in.Token, out.OK, out.Unknown)
	},
}

// semUse is a semaphore grant as a client saw it: permits held from the
// grant's return to the release's call (see hold).
type semUse struct {
	key        string
	owner      int
	token      uint64
	permits    int
	start, end int64
}

// checkPermits: at no moment did the grants the clients held add up to
// more than total.
func checkPermits(uses []semUse, total int) []string {
	type edge struct {
		at    int64
		delta int
		u     semUse
	}
	byKey := map[string][]edge{}
	for _, u := range uses {
		if u.end > u.start {
			byKey[u.key] = append(byKey[u.key], edge{u.start, u.permits, u}, edge{u.end, -u.permits, u})
		}
	}
	var bad []string
	for key, es := range byKey {
		// Ends before starts at the same instant: a hold ending at t
		// and one starting at t do not overlap.
		sort.Slice(es, func(i, j int) bool {
			if es[i].at != es[j].at {
				return es[i].at < es[j].at
			}
			return es[i].delta < es[j].delta
		})
		n := 0
		for _, e := range es {
			if n += e.delta; n > total {
				bad = append(bad, fmt.Sprintf("semaphore %s: %d of %d permits held at %v (owner %d took %d with token %d)",
					key, n, total, time.Duration(e.at), e.u.owner, e.u.permits, e.u.token))
			}
		}
	}
	return bad
}

// semWorkload runs workers that take 1 or 2 of total permits of
// semaphore key from cl and give them back until run closes, recording
// into h (its ops are semaphore operations only) and uses.
type semWorkload struct {
	h     *history
	mu    sync.Mutex
	uses  []semUse
	total int
	key   string
}

func (sw *semWorkload) run(ctx context.Context, cl *client.Client, workers, firstID int, run <-chan struct{}, wg *sync.WaitGroup) {
	for w := firstID; w < firstID+workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for i := 0; ; i++ {
				select {
				case <-run:
					return
				default:
				}
				// A handle (an owner) per grant, as the lock workers do:
				// a handle whose release failed would otherwise take its
				// own hold again, with the same token.
				s := cl.Semaphore(sw.key, sw.total, client.TTL(3*time.Second), client.AutoRenew())
				n := 1 + rng.IntN(2)
				owner := w<<20 | i // the handle's, in the model
				in := semInput{Key: sw.key, Owner: owner, Acquire: true, Permits: n, Total: sw.total}
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				call := sw.h.now()
				err := s.Acquire(actx, n)
				ret := sw.h.now()
				cancel()
				if err != nil {
					sw.h.add(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: lockOutput{}, Return: ret})
					continue
				}
				tok := s.Token()
				sw.h.add(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: lockOutput{OK: true, Token: tok}, Return: ret})
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				lost := false
				select {
				case <-s.Lost():
					lost = true
				default:
				}
				rcall := sw.h.now()
				rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
				err = s.Release(rctx)
				rcancel()
				rret := sw.h.now()
				out := lockOutput{OK: err == nil}
				if err != nil {
					out.Unknown = true
					rret = forever
				}
				sw.h.add(porcupine.Operation{ClientId: w, Input: semInput{Key: sw.key, Owner: owner, Token: tok}, Call: rcall, Output: out, Return: rret})
				if !lost {
					sw.mu.Lock()
					sw.uses = append(sw.uses, semUse{key: sw.key, owner: owner, token: tok, permits: n, start: ret, end: rcall})
					sw.mu.Unlock()
				}
			}
		}()
	}
}

// grants counts the workload's successful acquires.
func (sw *semWorkload) grants() int {
	n := 0
	for _, op := range sw.h.ops {
		if in := op.Input.(semInput); in.Acquire && op.Output.(lockOutput).OK {
			n++
		}
	}
	return n
}
