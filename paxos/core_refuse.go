package paxos

import (
	"math"
	"slices"
)

// What a Core refuses from its peers: messages no honest replica sends,
// which a buggy or hostile one could use to brick the group (a ballot no
// replica can out-ballot) or stall the node (a loop over an instance
// range nothing bounds). Every refusal is counted (Refused). A replica's
// messages to itself are its own and are never refused.
//
//	C16 learnAsked holds at most maxLearnAsked distinct peers, none of
//	    them 0 or this replica: those it sent a Learn to and has had no
//	    answer from
//	C17 while it awaits a snapshot, snapFrom is the peer that announced
//	    it (not 0, not this replica)

// maxLearnAsked bounds learnAsked (C16): a Learn not answered by the
// time this many others were sent is not waited for.
const maxLearnAsked = 8

// instanceLimit bounds every instance a Core takes from a peer or a
// snapshot: no group chooses 2^63 instances, and the headroom keeps each
// sum of an instance and a window from wrapping around.
const instanceLimit = math.MaxUint64 / 2

// satAdd returns a+b, or MaxUint64 where the sum would wrap.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// ownBallot reports whether a message of type t carries its sender's own
// ballot: a candidate's Prepare, a master's Accept and Heartbeat, and the
// TimeoutNow of the master that hands over. Replies (Promise, Accepted,
// HeartbeatAck) carry the ballot they answer, which is the receiver's,
// and Hint, the acceptor's promise, which may be anyone's.
func ownBallot(t MsgType) bool {
	switch t {
	case MsgPrepare, MsgAccept, MsgHeartbeat, MsgTimeoutNow:
		return true
	}
	return false
}

// plausible reports whether a peer's message m is one an honest replica
// could send: a ballot of a proposer's message is the sender's own, and no
// ballot lies more than MaxRoundJump rounds above the highest round this
// replica has seen. Step drops the others unread; why says which rule
// m broke.
func (c *Core) plausible(m *Message) (why RefuseReason, ok bool) {
	if m.From == c.cfg.ID {
		return 0, true
	}
	if ownBallot(m.Type) && m.Ballot.Node != m.From {
		return RefusedForeignBallot, false
	}
	limit := satAdd(c.maxRound, c.cfg.MaxRoundJump)
	if m.Ballot.Round > limit || m.Hint.Round > limit {
		return RefusedRoundJump, false
	}
	return 0, true
}

// RefuseReason is why a replica refused a peer's message or entry.
type RefuseReason uint8

// The reasons a replica refuses what a peer sent.
const (
	// RefusedForeignBallot: a Prepare, Accept, Heartbeat or TimeoutNow
	// whose ballot is not its sender's.
	RefusedForeignBallot RefuseReason = iota
	// RefusedRoundJump: a ballot more than Config.MaxRoundJump rounds
	// above the highest round the replica has seen.
	RefusedRoundJump
	// RefusedInstanceAhead: an Accept's entry beyond the instance window
	// (Config.MaxInstanceAhead), or a promise reporting one beyond the
	// recovery window.
	RefusedInstanceAhead
	// RefusedUnasked: a Learn answer from a peer this replica did not
	// ask.
	RefusedUnasked
	// RefusedSnapshot: a snapshot stream WantsSnapshot did not want. The
	// runtime that installs snapshots counts it; a Core never does.
	RefusedSnapshot
	// NumRefuseReasons is the number of reasons, the length of Refusals.
	NumRefuseReasons
)

// refuseNames are the reasons' names, as metrics label them.
var refuseNames = [NumRefuseReasons]string{
	RefusedForeignBallot: "foreign_ballot",
	RefusedRoundJump:     "round_jump",
	RefusedInstanceAhead: "instance_ahead",
	RefusedUnasked:       "unasked_answer",
	RefusedSnapshot:      "unrequested_snapshot",
}

// String returns the reason's name (foreign_ballot, round_jump, ...).
func (r RefuseReason) String() string {
	if r < NumRefuseReasons {
		return refuseNames[r]
	}
	return "unknown"
}

// Refusals counts refused messages and entries, by RefuseReason.
type Refusals [NumRefuseReasons]uint64

// Total returns the refusals of every reason.
func (r *Refusals) Total() uint64 {
	var n uint64
	for _, v := range r {
		n += v
	}
	return n
}

// refuse counts one refused message or entry, sent by from.
func (c *Core) refuse(why RefuseReason, from NodeID) {
	c.refused[why]++
	c.refusedBy = from
}

// Refused returns how many peers' messages and entries the Core refused
// as no honest replica sends them (a foreign or far-off ballot, an entry
// beyond the instance window, an answer to a question not asked).
func (c *Core) Refused() uint64 { return c.refused.Total() }

// Refusals returns the Core's refusals by reason (Refused is their sum).
// Like every Core method it is for the goroutine that drives the Core.
func (c *Core) Refusals() Refusals { return c.refused }

// LastRefused returns the peer whose message the Core refused last (0:
// none yet).
func (c *Core) LastRefused() NodeID { return c.refusedBy }

// acceptWindow returns the highest instance this replica stores from a
// peer's Accept: MaxInstanceAhead above its committed instance.
func (c *Core) acceptWindow() uint64 {
	return min(satAdd(c.hs.Committed, c.cfg.MaxInstanceAhead), instanceLimit)
}

// recoveryWindow returns the highest instance a candidate recovers from a
// promise: twice MaxInstanceAhead above its committed instance (see
// Config.MaxInstanceAhead).
func (c *Core) recoveryWindow() uint64 {
	return min(satAdd(c.hs.Committed, 2*c.cfg.MaxInstanceAhead), instanceLimit)
}

// promiseInWindow reports whether a promise's last instance and the
// entries it reports that are not chosen lie within the recovery window.
func (c *Core) promiseInWindow(m *Message) bool {
	w := c.recoveryWindow()
	if m.Instance > w {
		return false
	}
	for _, e := range m.Entries {
		if e.Instance > m.Committed && e.Instance > w {
			return false
		}
	}
	return true
}

// askedLearn records that this replica sent a Learn to p, which may
// answer with entries or a snapshot (C17).
func (c *Core) askedLearn(p NodeID) {
	if slices.Contains(c.learnAsked, p) {
		return
	}
	if len(c.learnAsked) >= maxLearnAsked {
		c.learnAsked = c.learnAsked[1:]
	}
	c.learnAsked = append(c.learnAsked, p)
}

// wasAsked reports whether p is a peer this replica sent a Learn to and
// has not had its answer from since.
func (c *Core) wasAsked(p NodeID) bool { return slices.Contains(c.learnAsked, p) }

// answered records that p answered a Learn: a second answer is not
// waited for.
func (c *Core) answered(p NodeID) {
	c.learnAsked = slices.DeleteFunc(c.learnAsked, func(q NodeID) bool { return q == p })
}

// checkRefuse checks C16–C17.
func (c *Core) checkRefuse(fail failFunc) {
	if len(c.learnAsked) > maxLearnAsked {
		fail("C16: %d peers asked to learn, at most %d", len(c.learnAsked), maxLearnAsked)
	}
	for i, p := range c.learnAsked {
		if p == 0 || p == c.cfg.ID || slices.Contains(c.learnAsked[:i], p) {
			fail("C16: asked to learn %v", c.learnAsked)
		}
	}
	if c.awaitSnap && (c.snapFrom == 0 || c.snapFrom == c.cfg.ID) {
		fail("C17: awaiting a snapshot from %d", c.snapFrom)
	}
}

// WantsSnapshot reports whether the runtime should begin installing a
// snapshot stream of instance applied from peer from: this replica asked
// that peer for the instances the snapshot replaces (a Learn), or that
// peer told it a snapshot follows, and the snapshot is ahead of what this
// replica applied. A stream nobody asked for would clear the state
// machine's keyspace for nothing.
func (c *Core) WantsSnapshot(from NodeID, applied uint64) bool {
	if from == 0 || from == c.cfg.ID || applied >= instanceLimit {
		return false
	}
	if applied < c.logStart-1 || (applied <= c.applied && !c.needSnap) {
		return false
	}
	return (c.awaitSnap && from == c.snapFrom) || c.wasAsked(from)
}

// storedIn returns the instances in [from, to] that hold an entry in
// memory or in flight, in order, without walking the range when it is
// wider than what is stored: an entry far above the others (which a
// replica loads as it was stored) costs no more than any other.
func (c *Core) storedIn(from, to uint64) []uint64 {
	if from > to {
		return nil
	}
	var out []uint64
	if to-from < uint64(len(c.entries)+len(c.inflight)) {
		for i := from; ; i++ {
			_, ok := c.entries[i]
			if !ok && c.inflight != nil {
				_, ok = c.inflight[i]
			}
			if ok {
				out = append(out, i)
			}
			if i == to {
				return out
			}
		}
	}
	for i := range c.entries {
		if i >= from && i <= to {
			out = append(out, i)
		}
	}
	for i := range c.inflight {
		if _, dup := c.entries[i]; !dup && i >= from && i <= to {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// foldRange folds every change chosen at an instance in [from, to] into
// the member set, walking the stored instances only.
func (c *Core) foldRange(from, to uint64) {
	for _, i := range c.storedIn(from, to) {
		c.foldChange(i)
	}
}

// entriesFrom collects stored entries from `from` to `to`, bounded by
// MaxMsgBytes. It reports whether it reached `to`. The entries at or below
// the applied instance come from the log, the rest from memory, walked by
// what is stored (storedIn), never over the raw instance range.
func (c *Core) entriesFrom(from, to uint64) ([]Entry, bool) {
	var out []Entry
	size := 0
	i := from
	if i <= c.applied && c.log != nil {
		upto := min(to, c.applied)
		es, err := c.log.Entries(i, upto, c.cfg.MaxMsgBytes)
		if err != nil {
			return nil, false
		}
		for _, e := range es {
			if e.Instance != i {
				return out, false
			}
			out = append(out, e)
			size += e.Value.Size()
			i++
		}
		if i <= upto {
			return out, false
		}
	}
	for _, inst := range c.storedIn(max(i, c.applied+1), to) {
		e, ok := c.entries[inst]
		if !ok {
			continue // in flight only: not stored yet
		}
		if size > 0 && size+e.Value.Size() > c.cfg.MaxMsgBytes {
			return out, false
		}
		out = append(out, e)
		size += e.Value.Size()
	}
	return out, true
}
