package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/paxlock/paxlock/client"
)

// This file holds what the fault suites check: the porcupine models of
// exclusive and read-write locks, the recorded history, and the checks on
// tokens and holds. Each check returns the violations it found.

// forever is the return time of an operation whose outcome is unknown: it
// may take effect at any time after its call.
const forever = int64(1 << 62)

// The lock model for porcupine, one partition per key. A release whose
// outcome is unknown may have happened or not; a hold whose release is
// unknown may also expire at any time, after which another owner may get
// the key. Tokens of fresh grants must exceed every earlier one. A renewal
// that succeeded must be by the holder.
type lockState struct {
	Owner     int
	Token     uint64
	Last      uint64
	Abandoned bool
}

type lockInput struct {
	Key     string
	Owner   int
	Acquire bool
	Renew   bool
	Token   uint64 // release, renew: the hold's token
}

type lockOutput struct {
	OK      bool
	Unknown bool
	Token   uint64 // acquire: the token granted
}

var lockModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{lockState{}} },
	Step: func(state, input, output any) []any {
		s := state.(lockState)
		in := input.(lockInput)
		out := output.(lockOutput)
		switch {
		case in.Acquire:
			if !out.OK {
				return []any{s} // the client made sure it holds nothing
			}
			switch {
			case s.Owner == in.Owner && out.Token == s.Token:
				return []any{s}
			case (s.Owner == 0 || s.Abandoned) && out.Token > s.Last:
				return []any{lockState{Owner: in.Owner, Token: out.Token, Last: out.Token}}
			}
			return nil
		case in.Renew:
			if !out.OK || s.Owner == in.Owner && s.Token == in.Token {
				return []any{s}
			}
			return nil
		}
		released := lockState{Last: s.Last}
		if out.Unknown || !out.OK {
			if s.Owner == in.Owner && s.Token == in.Token {
				return []any{released, lockState{Owner: s.Owner, Token: s.Token, Last: s.Last, Abandoned: true}}
			}
			return []any{s}
		}
		if s.Owner == in.Owner && s.Token == in.Token {
			return []any{released}
		}
		return nil
	},
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		return partitionByKey(history, func(in any) string { return in.(lockInput).Key })
	},
	Equal: func(a, b any) bool { return a.(lockState) == b.(lockState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(lockInput), output.(lockOutput)
		switch {
		case in.Acquire:
			return fmt.Sprintf("acquire(%s, o%d) -> ok=%v t=%d", in.Key, in.Owner, out.OK, out.Token)
		case in.Renew:
			return fmt.Sprintf("renew(%s, o%d, t%d) -> ok=%v", in.Key, in.Owner, in.Token, out.OK)
		}
		return fmt.Sprintf("release(%s, o%d, t%d) -> ok=%v unknown=%v", in.Key, in.Owner, in.Token, out.OK, out.Unknown)
	},
}

func partitionByKey(history []porcupine.Operation, key func(any) string) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	var keys []string
	for _, op := range history {
		k := key(op.Input)
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], op)
	}
	var out [][]porcupine.Operation
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

// The read-write lock model: a writer alone, or readers. Readers admitted
// in one grant share a token, so a reader's token may equal the last
// one while another reader holds it; every other grant's token exceeds
// every earlier one. Abandoned holds (release unknown, or lock lost) may
// expire whenever a conflicting grant needs them gone.
type rwHold struct {
	Owner     int
	Token     uint64
	Abandoned bool
}

type rwState struct {
	Write bool     // the hold (at most one) is a writer's
	Holds []rwHold // by owner
	Last  uint64
}

type rwInput struct {
	Key   string
	Owner int
	Read  bool
	Op    rwOp
	Token uint64 // release, renew: the hold's token
}

type rwOp uint8

const (
	rwAcquire rwOp = iota
	rwRelease
	rwRenew
)

func (s rwState) find(owner int) int {
	return slices.IndexFunc(s.Holds, func(h rwHold) bool { return h.Owner == owner })
}

// without returns s with hold i removed.
func (s rwState) without(i int) rwState {
	out := rwState{Write: s.Write, Last: s.Last, Holds: slices.Delete(slices.Clone(s.Holds), i, i+1)}
	if len(out.Holds) == 0 {
		out.Write = false
	}
	return out
}

// with returns s with hold h added (holds sorted by owner).
func (s rwState) with(h rwHold) rwState {
	out := rwState{Write: s.Write, Last: max(s.Last, h.Token), Holds: slices.Clone(s.Holds)}
	i, _ := slices.BinarySearchFunc(out.Holds, h.Owner, func(x rwHold, o int) int { return x.Owner - o })
	out.Holds = slices.Insert(out.Holds, i, h)
	return out
}

var rwModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{rwState{}} },
	Step: func(state, input, output any) []any {
		s := state.(rwState)
		in := input.(rwInput)
		out := output.(lockOutput)
		i := s.find(in.Owner)
		switch in.Op {
		case rwAcquire:
			if !out.OK {
				return []any{s}
			}
			if i >= 0 {
				switch {
				case s.Holds[i].Token == out.Token && s.Write == !in.Read:
					return []any{s} // reentrant
				case !s.Holds[i].Abandoned:
					return nil
				}
				s = s.without(i) // the owner's earlier hold ended meanwhile
			}
			if !in.Read || s.Write {
				// Every hold must be gone: only abandoned ones can be.
				for _, h := range s.Holds {
					if !h.Abandoned {
						return nil
					}
				}
				if out.Token <= s.Last {
					return nil
				}
				return []any{rwState{Write: !in.Read, Holds: []rwHold{{Owner: in.Owner, Token: out.Token}}, Last: out.Token}}
			}
			shared := out.Token == s.Last && slices.ContainsFunc(s.Holds, func(h rwHold) bool { return h.Token == s.Last })
			if out.Token <= s.Last && !shared {
				return nil
			}
			return []any{s.with(rwHold{Owner: in.Owner, Token: out.Token})}
		case rwRenew:
			if !out.OK || i >= 0 && s.Holds[i].Token == in.Token && s.Write == !in.Read {
				return []any{s}
			}
			return nil
		}
		match := i >= 0 && s.Holds[i].Token == in.Token && s.Write == !in.Read
		if out.Unknown || !out.OK {
			if match {
				ab := rwState{Write: s.Write, Last: s.Last, Holds: slices.Clone(s.Holds)}
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
		return partitionByKey(history, func(in any) string { return in.(rwInput).Key })
	},
	Equal: func(a, b any) bool {
		x, y := a.(rwState), b.(rwState)
		return x.Write == y.Write && x.Last == y.Last && slices.Equal(x.Holds, y.Holds)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(rwInput), output.(lockOutput)
		kind := "w"
		if in.Read {
			kind = "r"
		}
		switch in.Op {
		case rwAcquire:
			return fmt.Sprintf("%slock(%s, o%d) -> ok=%v t=%d", kind, in.Key, in.Owner, out.OK, out.Token)
		case rwRenew:
			return fmt.Sprintf("%srenew(%s, o%d, t%d) -> ok=%v", kind, in.Key, in.Owner, in.Token, out.OK)
		}
		return fmt.Sprintf("%sunlock(%s, o%d, t%d) -> ok=%v unknown=%v", kind, in.Key, in.Owner, in.Token, out.OK, out.Unknown)
	},
}

// hold is a lock held as a client saw it: from the grant's return to the
// release's call, or to the end of the validity the client could count on
// if the release failed.
type hold struct {
	key        string
	owner      int
	token      uint64
	read       bool
	start, end int64
	// freed is when the release returned, if it succeeded (else 0).
	freed int64
}

// answer is what a node said about an exclusive key outside a grant: a
// State read, or the holder a refused TryLock named.
type answer struct {
	key       string
	call, ret int64
	held      bool
	token     uint64 // the holder's, if held
	what      string // "state" or "try-lock"
}

// grant is a successful acquire.
type grant struct {
	key       string
	owner     int
	token     uint64
	call, ret int64
}

type history struct {
	mu      sync.Mutex
	base    time.Time
	ops     []porcupine.Operation
	holds   []hold
	grants  []grant
	answers []answer
}

func (h *history) now() int64 { return int64(time.Since(h.base)) }

func (h *history) add(op porcupine.Operation) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	switch in := op.Input.(type) {
	case lockInput:
		if out := op.Output.(lockOutput); in.Acquire && out.OK {
			h.grants = append(h.grants, grant{key: in.Key, owner: in.Owner, token: out.Token, call: op.Call, ret: op.Return})
		}
	case rwInput:
		if out := op.Output.(lockOutput); in.Op == rwAcquire && out.OK {
			h.grants = append(h.grants, grant{key: in.Key, owner: in.Owner, token: out.Token, call: op.Call, ret: op.Return})
		}
	case semInput:
		if out := op.Output.(lockOutput); in.Acquire && out.OK {
			h.grants = append(h.grants, grant{key: in.Key, owner: in.Owner, token: out.Token, call: op.Call, ret: op.Return})
		}
	}
	h.mu.Unlock()
}

func (h *history) addAnswer(a answer) {
	h.mu.Lock()
	h.answers = append(h.answers, a)
	h.mu.Unlock()
}

func (h *history) addHold(x hold) {
	h.mu.Lock()
	h.holds = append(h.holds, x)
	h.mu.Unlock()
}

// checkTokens: a grant that was called after another grant of the same key
// returned carries a strictly higher token. (Readers admitted in one
// grant share a token, but their calls overlap.)
func checkTokens(h *history) []string {
	byKey := map[string][]grant{}
	for _, g := range h.grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	var bad []string
	for key, gs := range byKey {
		byRet := slices.Clone(gs)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		sort.Slice(gs, func(i, j int) bool { return gs[i].call < gs[j].call })
		var top grant // the highest token among grants returned so far
		j := 0
		for _, b := range gs {
			for ; j < len(byRet) && byRet[j].ret < b.call; j++ {
				if byRet[j].token > top.token {
					top = byRet[j]
				}
			}
			if top.token != 0 && b.token <= top.token {
				bad = append(bad, fmt.Sprintf("key %s: owner %d granted token %d at %v, after owner %d's grant of token %d returned at %v",
					key, b.owner, b.token, time.Duration(b.ret), top.owner, top.token, time.Duration(top.ret)))
			}
		}
	}
	return bad
}

// checkHolds: two owners never held one key at once as the clients saw
// it, unless both held it for reading.
func checkHolds(h *history) []string {
	byKey := map[string][]hold{}
	for _, x := range h.holds {
		if x.end > x.start {
			byKey[x.key] = append(byKey[x.key], x)
		}
	}
	var bad []string
	for key, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
		for i, x := range hs {
			for _, y := range hs[i+1:] {
				if y.start >= x.end {
					break
				}
				if x.owner != y.owner && !(x.read && y.read) {
					bad = append(bad, fmt.Sprintf("key %s: owner %d (token %d, read=%v) held from %v while owner %d (token %d, read=%v) held until %v",
						key, y.owner, y.token, y.read, time.Duration(y.start), x.owner, x.token, x.read, time.Duration(x.end)))
				}
			}
		}
	}
	return bad
}

// checkLinearizable checks ops against model, with a second, longer bound
// if the first times out: a history that was not verified is a failure.
// It returns "" if the history is linearizable; otherwise why not, having
// written porcupine's visualization to dir.
func checkLinearizable(model porcupine.Model, ops []porcupine.Operation, name, dir string, logf func(string, ...any)) string {
	res, info := porcupine.CheckOperationsVerbose(model, ops, 60*time.Second)
	if res == porcupine.Unknown {
		logf("%s: linearizability check timed out after 60s; checking again for up to 180s", name)
		res, info = porcupine.CheckOperationsVerbose(model, ops, 180*time.Second)
	}
	switch res {
	case porcupine.Illegal:
		path := filepath.Join(dir, "history-"+name+".html")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Sprintf("%s history of %d operations is not linearizable (visualization not written: %v)", name, len(ops), err)
		}
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			return fmt.Sprintf("%s history of %d operations is not linearizable (visualization not written: %v)", name, len(ops), err)
		}
		return fmt.Sprintf("%s history of %d operations is not linearizable; see %s", name, len(ops), path)
	case porcupine.Unknown:
		return fmt.Sprintf("%s: linearizability check timed out twice (60s, then 180s): the history of %d operations is not verified", name, len(ops))
	}
	return ""
}

// checkAnswers: what a node says about an exclusive key must be true at
// some point between the question and the answer. It must not name a hold
// whose release had returned before the question was asked (a stale
// master), nor a token granted only after the answer; and while a hold is
// certainly in place (between its grant's return and the end of its
// hold, see hold) an answer given entirely within it must name that hold.
func checkAnswers(h *history) []string {
	byToken := map[string]map[uint64]hold{}
	byKey := map[string][]hold{}
	for _, x := range h.holds {
		if byToken[x.key] == nil {
			byToken[x.key] = map[uint64]hold{}
		}
		byToken[x.key][x.token] = x
		byKey[x.key] = append(byKey[x.key], x)
	}
	// Each key's holds by start, with the latest end among the first i+1.
	maxEnd := map[string][]int64{}
	for key, hs := range byKey {
		sort.Slice(hs, func(i, j int) bool { return hs[i].start < hs[j].start })
		me := make([]int64, len(hs))
		for i, x := range hs {
			me[i] = x.end
			if i > 0 {
				me[i] = max(me[i], me[i-1])
			}
		}
		maxEnd[key] = me
	}
	called := map[string]map[uint64]int64{} // key -> token -> its grant's call
	for _, g := range h.grants {
		if called[g.key] == nil {
			called[g.key] = map[uint64]int64{}
		}
		called[g.key][g.token] = g.call
	}
	var bad []string
	for _, a := range h.answers {
		if a.held {
			if x, ok := byToken[a.key][a.token]; ok && x.freed != 0 && x.freed < a.call {
				bad = append(bad, fmt.Sprintf("key %s: %s called at %v named token %d, released (by owner %d) at %v",
					a.key, a.what, time.Duration(a.call), a.token, x.owner, time.Duration(x.freed)))
			}
			if c, ok := called[a.key][a.token]; ok && c > a.ret {
				bad = append(bad, fmt.Sprintf("key %s: %s returned at %v named token %d, whose acquire was called at %v",
					a.key, a.what, time.Duration(a.ret), a.token, time.Duration(c)))
			}
		}
		hs, me := byKey[a.key], maxEnd[a.key]
		// The holds that started before the call, latest first, while
		// one of them may still end after the answer.
		i := sort.Search(len(hs), func(i int) bool { return hs[i].start >= a.call })
		for i--; i >= 0 && me[i] > a.ret; i-- {
			if x := hs[i]; x.end > a.ret && (!a.held || a.token != x.token) {
				said := "free"
				if a.held {
					said = fmt.Sprintf("held with token %d", a.token)
				}
				bad = append(bad, fmt.Sprintf("key %s: %s during [%v, %v] said %s while owner %d held token %d from %v to %v",
					a.key, a.what, time.Duration(a.call), time.Duration(a.ret), said, x.owner, x.token, time.Duration(x.start), time.Duration(x.end)))
			}
		}
	}
	return bad
}

// runLockWorkers starts workers (client ids 0..workers-1) that take an
// exclusive lock on one of keys through cl (a handle per acquire, TTL 3 s
// with AutoRenew, 2 s to wait), hold it up to 5 ms and release it, until
// run closes, recording every acquire and release into h and every hold
// not known lost into h.holds. stream seeds their random choices.
func runLockWorkers(ctx context.Context, cl *client.Client, h *history, keys []string, workers int, stream uint64, run <-chan struct{}, wg *sync.WaitGroup) {
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), stream))
			for {
				select {
				case <-run:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				m := cl.Mutex(key, client.TTL(3*time.Second), client.AutoRenew())
				lctx, lcancel := context.WithTimeout(ctx, 2*time.Second)
				call := h.now()
				err := m.Lock(lctx)
				ret := h.now()
				lcancel()
				if err != nil {
					h.add(porcupine.Operation{ClientId: w, Input: lockInput{Key: key, Owner: w, Acquire: true}, Call: call, Output: lockOutput{}, Return: ret})
					continue
				}
				tok := m.Token()
				h.add(porcupine.Operation{ClientId: w, Input: lockInput{Key: key, Owner: w, Acquire: true}, Call: call, Output: lockOutput{OK: true, Token: tok}, Return: ret})
				time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
				lost := false
				select {
				case <-m.Lost():
					lost = true
				default:
				}
				rcall := h.now()
				uctx, ucancel := context.WithTimeout(ctx, 5*time.Second)
				err = m.Unlock(uctx)
				ucancel()
				rret := h.now()
				out := lockOutput{OK: err == nil}
				if err != nil {
					out.Unknown = true
					rret = forever // may take effect any time later
				}
				h.add(porcupine.Operation{ClientId: w, Input: lockInput{Key: key, Owner: w, Token: tok}, Call: rcall, Output: out, Return: rret})
				if !lost {
					h.addHold(hold{key: key, owner: w, token: tok, start: ret, end: rcall})
				}
			}
		}()
	}
}
