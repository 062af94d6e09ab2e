package group

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// get returns a copy of key's record, or nil: what a test reads of the
// table (the workers read records in place, with view).
func (sm *StateMachine) get(key string) *lockRec {
	var cp *lockRec
	sm.view(key, func(l *lockRec) { cp = l.clone() })
	return cp
}

// clone returns a deep copy of l (nil for nil).
func (l *lockRec) clone() *lockRec {
	if l == nil {
		return nil
	}
	cp := &lockRec{first: l.first}
	if l.x != nil {
		cp.x = &recExt{more: append([]holder(nil), l.x.more...), vals: append([]string(nil), l.x.vals...),
			limit: l.x.limit, perm: append([]uint32(nil), l.x.perm...), delays: append([]uint32(nil), l.x.delays...),
			maxHolds: append([]uint32(nil), l.x.maxHolds...)}
	}
	return cp
}

// TestViewUnderConcurrentApply: the master's worker answers State and
// try-lock requests from a read-held key's record while another goroutine
// applies commands that change that record in place (renewals setting a
// reader's value, a reader joining and leaving, which move the holds'
// slices). Every answer reads one consistent record: the asker's value is
// one of the two it is set to, and the readers counted are those held.
// Under the race detector, a worker that kept a record, or a pointer or
// slice into one, past its shard's lock (see StateMachine.view) is caught
// here: the renewals write the very fields the answers read.
func TestViewUnderConcurrentApply(t *testing.T) {
	t.Parallel()
	r := newWorkerRig(t)
	r.fg.auto = true
	r.master(true)
	const readers = 16
	full := fullKey("ns", "k")
	vals := [2]string{strings.Repeat("a", 512), strings.Repeat("b", 700)}
	s := &lastSink{}
	tokens := make([]uint64, readers)
	for i := range readers {
		r.request(Request{Op: OpAcquire, Key: "k", Kind: wire.KindRead, Owner: owner(1, uint64(i+1)), TTL: time.Hour, Value: vals[0], Sink: s})
		if s.last.Status != wire.StatusSuccess {
			t.Fatalf("reader %d: %+v", i, s.last)
		}
		tokens[i] = s.last.Token
	}
	asker := owner(1, readers) // the last reader: its value is renewed
	done := make(chan struct{})
	applied := make(chan error, 1)
	go func() {
		// Instances far above the fake group's own, so that the tokens
		// of the joining reader are its own.
		inst := uint64(1 << 40)
		var token uint64 // the last command's
		apply := func(c command) wire.Status {
			inst++
			res := make([]any, 1)
			r.sm.Apply(inst, [][]byte{appendCommand(nil, &c)}, r.kv, res)
			token = res[0].(*outcome).token
			return res[0].(*outcome).status
		}
		joiner := owner(9, 1)
		for i := 0; ; i++ {
			select {
			case <-done:
				applied <- nil
				return
			default:
			}
			if st := apply(command{op: opRenew, key: full, owner: asker, token: tokens[readers-1], ttlMs: 3600000, setValue: true, value: vals[i%2]}); st != wire.StatusSuccess {
				applied <- fmt.Errorf("renew %d: %v", i, st)
				return
			}
			if st := apply(command{op: opAcquire, key: full, owner: joiner, kind: wire.KindRead, ttlMs: 3600000, value: vals[1]}); st != wire.StatusSuccess {
				applied <- fmt.Errorf("join %d: %v", i, st)
				return
			}
			if st := apply(command{op: opRelease, key: full, owner: joiner, token: token}); st != wire.StatusSuccess {
				applied <- fmt.Errorf("leave %d: %v", i, st)
				return
			}
		}
	}()
	for i := range 2000 {
		r.request(Request{Op: OpState, Key: "k", Owner: asker, Sink: s})
		resp := s.last
		if resp.Status != wire.StatusSuccess || resp.Holder != asker || (resp.Value != vals[0] && resp.Value != vals[1]) ||
			resp.Readers < readers || resp.Readers > readers+1 {
			close(done)
			t.Fatalf("state %d answered %v holder %v, %d readers, a value of %d bytes", i, resp.Status, resp.Holder, resp.Readers, len(resp.Value))
		}
		r.request(Request{Op: OpAcquire, Key: "k", Kind: wire.KindWrite, Owner: owner(2, 1), Sink: s})
		if resp := s.last; resp.Status != wire.StatusLockOccupied || resp.Readers < readers || resp.Readers > readers+1 {
			close(done)
			t.Fatalf("try-lock %d answered %v with %d readers", i, resp.Status, resp.Readers)
		}
	}
	close(done)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
}
