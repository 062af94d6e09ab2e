package paxos

import (
	"encoding/binary"
	"math"
	"testing"
)

// hostile steps m, from node 3 of a three-replica group, into node to.
func hostile(tn *testNet, to NodeID, m Message) {
	m.Group, m.From, m.To = tn.cfg.Group, 3, to
	tn.core(to).Step(m)
	tn.flush()
}

// TestRefuseMaxRoundAccept: an Accept of round MaxUint64 is refused, so
// an honest replica still out-ballots every promise afterwards.
func TestRefuseMaxRoundAccept(t *testing.T) {
	tn := newTestNet3(t)
	tn.elect(1)
	hostile(tn, 2, Message{Type: MsgAccept, Ballot: Ballot{Round: math.MaxUint64, Node: 3},
		Entries: []Entry{{Instance: 1, Value: Value{Cmds: [][]byte{[]byte("x")}}}}})
	c := tn.core(2)
	if c.hs.Promised.Round == math.MaxUint64 || c.maxRound == math.MaxUint64 || c.Refused() == 0 || c.Refusals()[RefusedRoundJump] != c.Refused() {
		t.Fatalf("promised %s, max round %d, refused %v", c.hs.Promised, c.maxRound, c.Refusals())
	}
	tn.crash(1)
	tn.tick(300)
	if !tn.core(2).Status().Serving && !tn.core(3).Status().Serving {
		t.Fatalf("no master after node 1 stopped: %+v %+v", tn.core(2).Status(), tn.core(3).Status())
	}
}

// TestRefuseForeignBallot: an Accept whose ballot is not its sender's is
// refused.
func TestRefuseForeignBallot(t *testing.T) {
	tn := newTestNet3(t)
	tn.elect(1)
	before := tn.core(2).hs.Promised
	hostile(tn, 2, Message{Type: MsgAccept, Ballot: Ballot{Round: before.Round + 1, Node: 1},
		Entries: []Entry{{Instance: 5, Value: Value{Cmds: [][]byte{[]byte("x")}}}}})
	if c := tn.core(2); c.hs.Promised != before || c.Refused() != 1 || c.Refusals()[RefusedForeignBallot] != 1 || c.LastRefused() != 3 || len(c.entries) != 0 {
		t.Fatalf("promised %s (was %s), refused %v, entries %d", c.hs.Promised, before, c.Refusals(), len(c.entries))
	}
}

// TestRefuseEntryBeyondWindow: an entry at instance MaxUint64 is neither
// stored nor voted for, and a Prepare's answer does not walk to it.
func TestRefuseEntryBeyondWindow(t *testing.T) {
	tn := newTestNet3(t)
	tn.elect(1)
	b := Ballot{Round: tn.core(2).maxRound + 1, Node: 3}
	hostile(tn, 2, Message{Type: MsgAccept, Ballot: b, Entries: []Entry{{Instance: math.MaxUint64, Value: Value{Cmds: [][]byte{[]byte("x")}}}}})
	c := tn.core(2)
	if c.last == math.MaxUint64 || c.Refused() != 1 || c.Refusals()[RefusedInstanceAhead] != 1 {
		t.Fatalf("last %d, refused %v", c.last, c.Refusals())
	}
	tn.queue = nil
	tn.crash(1)
	tn.tick(300)
	if !tn.core(2).Status().Serving && !tn.core(3).Status().Serving {
		t.Fatalf("no master after node 1 stopped: %+v %+v", tn.core(2).Status(), tn.core(3).Status())
	}
}

// TestEntriesFromWalksStored: a stored entry far above the others (as a
// replica reloads one) costs entriesFrom one step, not the range.
func TestEntriesFromWalksStored(t *testing.T) {
	tn := newTestNet3(t)
	c := tn.core(1)
	c.entries[math.MaxUint64-1] = Entry{Instance: math.MaxUint64 - 1}
	c.last = math.MaxUint64 - 1
	es, ok := c.entriesFrom(1, c.last)
	if !ok || len(es) != 1 {
		t.Fatalf("entries %v, complete %v", es, ok)
	}
}

// TestRefuseUnaskedSnapshot: a LearnReply announcing a snapshot from a
// peer not asked is refused, and no stream from it is wanted.
func TestRefuseUnaskedSnapshot(t *testing.T) {
	tn := newTestNet3(t)
	tn.elect(1)
	hostile(tn, 2, Message{Type: MsgLearnReply, Snapshot: true, Instance: 1, LogStart: 100, Committed: 200})
	c := tn.core(2)
	if c.awaitSnap || c.WantsSnapshot(3, 150) || c.Refused() != 1 || c.Refusals()[RefusedUnasked] != 1 {
		t.Fatalf("await %v, wants %v, refused %v", c.awaitSnap, c.WantsSnapshot(3, 150), c.Refusals())
	}
}

// FuzzHostilePeer drives a three-replica group whose node 3 is hostile:
// the input is a sequence of messages (2-byte length, then the peer wire
// encoding) that node 3 sends to node 1 or 2, between ticks. The honest
// cores' invariants hold after every step (testNet checks them), and
// afterwards nodes 1 and 2 still elect a master and commit a proposal.
func FuzzHostilePeer(f *testing.F) {
	seed := func(ms ...Message) []byte {
		var b []byte
		for _, m := range ms {
			enc := AppendMessage(nil, &m)
			b = binary.BigEndian.AppendUint16(b, uint16(len(enc)))
			b = append(b, enc...)
		}
		return b
	}
	val := Value{Cmds: [][]byte{[]byte("x")}}
	f.Add(seed(Message{Type: MsgAccept, Ballot: Ballot{Round: math.MaxUint64, Node: 3}, Entries: []Entry{{Instance: 1, Value: val}}}))
	f.Add(seed(Message{Type: MsgAccept, Ballot: Ballot{Round: 5, Node: 3}, Entries: []Entry{{Instance: math.MaxUint64, Value: val}}}))
	f.Add(seed(Message{Type: MsgAccept, Ballot: Ballot{Round: 5, Node: 1}, Entries: []Entry{{Instance: 1, Value: val}}}))
	f.Add(seed(Message{Type: MsgLearnReply, Snapshot: true, Instance: 1, LogStart: 100, Committed: 200}))
	f.Add(seed(Message{Type: MsgPrepare, Ballot: Ballot{Round: 9, Node: 3}, Instance: 1},
		Message{Type: MsgPromise, Ballot: Ballot{Round: 1, Node: 1}, Instance: math.MaxUint64}))
	f.Fuzz(func(t *testing.T, in []byte) {
		// A small instance window keeps each input cheap (a promise may
		// make a candidate recover every instance up to twice the window,
		// which the invariant checks walk after every step) and puts its
		// edge within the fuzzer's reach.
		tn := newTestNet(t, 3, Config{Group: 1, HeartbeatTicks: 2, LeaseTicks: 10, MaxInflight: 4, MaxInstanceAhead: 64})
		tn.crash(3)
		for len(in) >= 3 {
			n := int(binary.BigEndian.Uint16(in))
			in = in[2:]
			if n > len(in) {
				break
			}
			m, err := DecodeMessage(in[:n])
			in = in[n:]
			if err != nil {
				tn.tick(1)
				continue
			}
			to := NodeID(1 + m.To%2)
			m.Group, m.From, m.To = tn.cfg.Group, 3, to
			tn.core(to).Step(m)
			tn.flush()
			tn.deliver(all)
		}
		tn.queue = nil
		for range 400 {
			tn.tick(1)
			for _, id := range []NodeID{1, 2} {
				if c := tn.core(id); c.Status().Serving {
					if err := c.Propose([]byte("after"), 1); err == nil {
						tn.flush()
						tn.tick(5)
						for _, a := range tn.node(id).apps {
							if len(a.Value.Cmds) == 1 && string(a.Value.Cmds[0]) == "after" {
								return
							}
						}
					}
				}
			}
		}
		t.Fatalf("no honest majority committed a proposal; 1: %+v 2: %+v", tn.core(1).Status(), tn.core(2).Status())
	})
}
