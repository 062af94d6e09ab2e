package paxos

import ()

// Applied is one chosen instance handed to the state machine. Tags is set
// on the replica that proposed the value: Tags[i] is the tag given with
// Value.Cmds[i].
type Applied struct {
	Instance uint64
	Value    Value
	Tags     []uint64
}

// Failed reports proposals that did not and will not take effect.
type Failed struct {
	Tags []uint64
	Err  error
}

// SoftState is what a replica knows of its group's mastership.
type SoftState struct {
	// Master is the node believed to be master, 0 if none is known.
	Master NodeID
	// Ballot is the master's ballot.
	Ballot Ballot
	// Serving is true on the master once it holds a lease and has applied
	// every instance chosen before its term: it may answer from applied
	// state and accept proposals.
	Serving bool
}

// Ready is what a Core asks its driver to do. Its contract is about
// durability: what must be on disk before which message leaves.
//
//  1. Write HardState (when HardStateChanged or CommittedChanged) and
//     Entries to stable storage. The write may complete later (a
//     pipelined driver issues it and goes on), but writes must become
//     durable in the order of the Readys that asked for them. Entries
//     marked WriteOnly (a non-voter's copy, Config.QuorumSync) are written
//     in the same order but ask for no sync of their own: NeedsSync says
//     whether this Ready needs one.
//  2. Send Messages at once: they vouch for nothing this replica has not
//     yet made durable (Accept, Prepare, Heartbeat, Learn, LearnReply,
//     TimeoutNow), so they may leave before, or while, step 1 runs.
//  3. Send MessagesAfterSync only once the writes of this Ready and of every
//     earlier Ready are durable: they are this replica's votes and promises
//     (Promise, Accepted, HeartbeatAck). Those addressed to this replica
//     itself — the master's own vote, the candidate's own promise — go back
//     into Step; the Core never counts its own vote before its sync.
//  4. Apply Apply in order and resolve Failed; these may run before step 1
//     completes: an instance is only ever applied once a quorum has durably
//     accepted it (step 3 on each of them), so its result may be answered
//     at once. The state machine's own writes belong to the same ordered
//     stream as step 1's.
//  5. Start a snapshot stream to each of SendSnapshot.
//
// Advance may be called as soon as the driver has taken responsibility for
// all of the above (issued the write, queued the after-sync messages): the
// Core does not wait for durability; it learns of it only through the
// after-sync messages it receives back. That is what lets a driver build
// and send the next Ready while this one's fsync runs.
type Ready struct {
	HardState HardState
	// HardStateChanged says Promised changed, or that MessagesAfterSync
	// vouch for entries that earlier Readys wrote WriteOnly: persist it
	// before sending anything in MessagesAfterSync (its sync makes every
	// earlier write durable with it). CommittedChanged says only
	// Committed changed: persist it with the next write; it may be lost
	// in a crash.
	HardStateChanged bool
	CommittedChanged bool
	Entries          []Entry
	// WriteOnly says every entry of Entries is a non-voter's copy
	// (Config.QuorumSync): nothing this replica sends vouches for them
	// until a later Ready that needs a sync made them durable, so this
	// Ready asks for no sync on their account.
	WriteOnly bool
	// The slices Entries, Messages, MessagesAfterSync and Apply belong to
	// the Core again once Advance(rd) returns: it reuses their backing
	// arrays for the next Ready, so a driver copies what it keeps past
	// Advance (the elements: a Message's Entries and an Entry's commands
	// are never reused and may be kept).
	//
	// Messages may leave before this Ready's writes are durable.
	Messages []Message
	// MessagesAfterSync may leave only after this Ready's writes and every
	// earlier Ready's are durable; those To this replica go back to Step.
	MessagesAfterSync []Message
	Apply             []Applied
	Failed            []Failed
	SendSnapshot      []NodeID
	Soft              SoftState
	SoftChanged       bool
}

// Empty reports whether rd asks for nothing.
func (rd *Ready) Empty() bool {
	return !rd.HardStateChanged && !rd.CommittedChanged && len(rd.Entries) == 0 && len(rd.Messages) == 0 &&
		len(rd.MessagesAfterSync) == 0 && len(rd.Apply) == 0 && len(rd.Failed) == 0 && len(rd.SendSnapshot) == 0 && !rd.SoftChanged
}

// NeedsSync reports whether rd asks for a durable write: one that must be
// synced, with every earlier write, before MessagesAfterSync leave.
func (rd *Ready) NeedsSync() bool {
	return rd.HardStateChanged || len(rd.Entries) > 0 && !rd.WriteOnly
}

// afterSync reports whether a message of type t vouches for durable state
// of its sender, and so must wait for the sync of what its sender wrote.
func afterSync(t MsgType) bool {
	return t == MsgPromise || t == MsgAccepted || t == MsgHeartbeatAck
}

// HasReady reports whether Ready would return work.
func (c *Core) HasReady() bool {
	return c.hsDirty || c.commitDirty || len(c.newEnts) > 0 || len(c.msgs) > 0 || len(c.msgsAfter) > 0 || len(c.failed) > 0 ||
		len(c.snapSend) > 0 || c.softDirty || (c.applied < c.hs.Committed && !c.awaitSnap && !c.needSnap && c.entries[c.applied+1].Instance != 0) ||
		((len(c.queue) > 0 || c.pendingChange != nil) && c.changeInst == 0 && c.role == master && c.soft.Serving && c.now < c.leaseExpiry && len(c.inflight) < c.cfg.MaxInflight)
}

// Ready collects what the driver must do (see Ready for the order and
// what must be durable first); call Advance once the driver has taken it.
// Commands proposed since the last Ready start their instances here, so
// everything proposed between two Readys shares an instance when the
// window allows.
func (c *Core) Ready() Ready {
	c.propose()
	rd := Ready{
		HardState:         c.hs,
		HardStateChanged:  c.hsDirty,
		CommittedChanged:  c.commitDirty,
		Entries:           c.newEnts,
		WriteOnly:         len(c.newEnts) > 0 && !c.entsSync,
		Messages:          c.msgs,
		MessagesAfterSync: c.msgsAfter,
		Failed:            c.failed,
		SendSnapshot:      c.snapSend,
		Soft:              c.soft,
		SoftChanged:       c.softDirty,
	}
	size := 0
	for i := c.applied + 1; i <= c.hs.Committed && size < c.cfg.MaxMsgBytes && !c.awaitSnap && !c.needSnap; i++ {
		e, ok := c.entries[i]
		if !ok {
			break
		}
		a := Applied{Instance: i, Value: e.Value}
		if p, ok := c.mine[i]; ok {
			if e.Value.Origin == p.origin && e.Value.Seq == p.seq {
				a.Tags = p.tags
			} else {
				rd.Failed = append(rd.Failed, Failed{Tags: p.tags, Err: ErrNotChosen})
			}
		}
		if rd.Apply == nil {
			rd.Apply = c.applyBuf[:0]
		}
		rd.Apply = append(rd.Apply, a)
		size += e.Value.Size()
	}
	return rd
}

// Advance tells the Core that the driver took rd: its writes are issued
// (not necessarily durable), its messages sent or queued behind the sync.
func (c *Core) Advance(rd Ready) {
	if rd.NeedsSync() {
		// Its sync makes every earlier write durable too, the
		// write-only ones included.
		c.unsynced = false
	}
	c.entsSync = false
	c.hsDirty = false
	c.commitDirty = false
	c.softDirty = false
	// Keep the backing arrays (see Ready), without what they refer to.
	c.newEnts = reuse(rd.Entries)
	c.msgs = reuse(rd.Messages)
	c.msgsAfter = reuse(rd.MessagesAfterSync)
	c.failed = nil
	c.snapSend = nil
	for _, a := range rd.Apply {
		delete(c.entries, a.Instance)
		delete(c.mine, a.Instance)
		c.applied = a.Instance
	}
	if rd.Apply != nil {
		c.applyBuf = reuse(rd.Apply)
	}
	if c.role == master && !c.soft.Serving && c.applied >= c.servingAt {
		c.setSoft(SoftState{Master: c.cfg.ID, Ballot: c.ballot, Serving: true})
		c.propose()
	}
}

// reuse returns s emptied for reuse, its elements zeroed so that they keep
// nothing alive; an array grown past a large burst is dropped instead.
func reuse[T any](s []T) []T {
	if cap(s) > 1024 {
		return nil
	}
	clear(s)
	return s[:0]
}
