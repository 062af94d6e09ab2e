package paxos

import (
	"errors"
	"fmt"
)

// NodeID names a replica. Zero is not a valid NodeID.
type NodeID uint32

// GroupID names one replication group on a node.
type GroupID uint32

// Ballot orders master terms: by Round, then by Node. The zero Ballot is
// lower than every ballot a node can use.
type Ballot struct {
	Round uint64
	Node  NodeID
}

// Less reports whether b orders before o.
func (b Ballot) Less(o Ballot) bool {
	if b.Round != o.Round {
		return b.Round < o.Round
	}
	return b.Node < o.Node
}

// IsZero reports whether b is the zero ballot.
func (b Ballot) IsZero() bool { return b.Round == 0 && b.Node == 0 }

// String formats the ballot as round.node.
func (b Ballot) String() string { return fmt.Sprintf("%d.%d", b.Round, b.Node) }

// Value is what one instance chooses: a batch of opaque commands, tagged with
// the ballot and sequence number under which it was first proposed so that
// the proposer can recognise its own batch when the instance is applied. A
// no-op value has no commands.
//
// A value that carries a Change changes the group's member set and has no
// commands (see Membership and docs/design.md, "Membership").
type Value struct {
	Origin Ballot
	Seq    uint64
	Cmds   [][]byte
	Change *MemberChange
}

// Same reports whether v and o are the same proposal.
func (v Value) Same(o Value) bool { return v.Origin == o.Origin && v.Seq == o.Seq }

// Size returns the approximate encoded size of v in bytes.
func (v Value) Size() int {
	n := 24
	if v.Change != nil {
		n += 16
	}
	for _, c := range v.Cmds {
		n += len(c) + 4
	}
	return n
}

// Entry is one instance of the log as an acceptor stores it: the value it
// accepted and the ballot it accepted it in.
type Entry struct {
	Instance uint64
	Ballot   Ballot
	Value    Value
}

// HardState is the part of an acceptor's state that must survive a crash
// before it answers: the highest ballot it promised. Committed is the highest
// instance known chosen with every instance below it; it may be persisted
// lazily (a replica relearns it), but it never goes backwards.
type HardState struct {
	Promised  Ballot
	Committed uint64
}

// MsgType is the kind of a Message.
type MsgType uint8

// Message types.
const (
	MsgPrepare      MsgType = iota + 1 // phase 1a: Ballot, Instance = first instance asked for, Released, Committed
	MsgPromise                         // phase 1b: Ballot, Entries (accepted at or after Instance), Committed, LogStart, Reject
	MsgAccept                          // phase 2a: Ballot, Entries (one or more consecutive), Committed, WriteOnly
	MsgAccepted                        // phase 2b: Ballot, Instance, Reject (Hint = promised)
	MsgHeartbeat                       // lease renewal and commit notice: Ballot, Committed, Tick
	MsgHeartbeatAck                    // Ballot, Tick (echoed), Reject
	MsgLearn                           // catch-up request: Instance = first instance wanted
	MsgLearnReply                      // Entries (chosen), Committed, LogStart (Snapshot if behind it)
	MsgTimeoutNow                      // hand-off: the master of Ballot stepped down; campaign now
	MsgSnapshot                        // a snapshot stream (handled by the runtime): Instance, ChunkSeq, Chunk, LastChunk; or its ChunkAck
)

var msgTypeNames = [...]string{"?", "Prepare", "Promise", "Accept", "Accepted", "Heartbeat", "HeartbeatAck", "Learn", "LearnReply", "TimeoutNow", "Snapshot"}

// String returns the type's name.
func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MsgType(%d)", uint8(t))
}

// Message is what replicas of one group say to each other. Which fields
// matter depends on Type.
type Message struct {
	Type      MsgType
	Group     GroupID
	From, To  NodeID
	Ballot    Ballot
	Hint      Ballot // on rejection: the ballot the acceptor promised; on Prepare: the released ballot of a hand-off
	Instance  uint64
	Committed uint64
	LogStart  uint64
	Tick      uint64
	Reject    bool
	// Snapshot says, on LearnReply, that the sender's log no longer holds
	// Instance and a snapshot stream follows.
	Snapshot bool
	Entries  []Entry
	// Chunk carries snapshot bytes (MsgSnapshot), with Instance = the
	// snapshot's applied instance.
	Chunk []byte
	// ChunkSeq numbers a MsgSnapshot's chunk within its stream, from 0;
	// an acknowledgement echoes it.
	ChunkSeq uint64
	// LastChunk marks a stream's final chunk (MsgSnapshot).
	LastChunk bool
	// ChunkAck says a MsgSnapshot acknowledges chunk ChunkSeq of the
	// stream of Instance rather than carrying one.
	ChunkAck bool
	// WriteOnly says, on MsgAccept, that the receiver is a non-voter for
	// these entries (Config.QuorumSync): it stores them without asking
	// for a sync and answers nothing. An Accept without it asks for a
	// vote: the receiver syncs what it holds and answers Accepted.
	WriteOnly bool
}

// Errors returned by the package.
var (
	// ErrNotMaster means this replica is not the group's master; the
	// command was not proposed.
	ErrNotMaster = errors.New("paxos: not master")
	// ErrOverloaded means the proposal queue is full; the command was not
	// proposed.
	ErrOverloaded = errors.New("paxos: proposal queue full")
	// ErrNotChosen means the instance that carried the command chose
	// another value: the command definitely did not take effect.
	ErrNotChosen = errors.New("paxos: proposal lost to another master")
	// ErrStopped means the group is shutting down.
	ErrStopped = errors.New("paxos: group stopped")
	// ErrOutcomeUnknown means the replica stopped (shut down, or failed
	// its storage) after the command had reached its consensus core: the
	// command may already be in an accepted instance and may yet be chosen
	// through another master, so the caller cannot assume either outcome.
	// The error also matches the reason the replica stopped (ErrStopped,
	// and ErrStorageFailed when that was the cause).
	ErrOutcomeUnknown = errors.New("paxos: replica stopped with the command in flight; outcome unknown")
	// ErrTooLarge means a command exceeds the batch byte limit.
	ErrTooLarge = errors.New("paxos: command too large")
	// ErrCorrupt means stored or received bytes could not be decoded.
	ErrCorrupt = errors.New("paxos: corrupt data")
	// ErrStorageFailed means a write or fsync of the node's store failed:
	// the store refuses every write from then on and the node's groups are
	// stopped (Storage.Err). A proposal that fails for it also matches
	// ErrStopped, and the cause (the filesystem's error) is wrapped too.
	ErrStorageFailed = errors.New("paxos: storage failed")
	// ErrChangeInProgress means a membership change is already queued or
	// in flight; only one change is decided at a time.
	ErrChangeInProgress = errors.New("paxos: membership change in progress")
	// ErrBadChange means a membership change does not apply to the
	// current member set (adding a member or a removed id, removing a
	// non-member or the last member); the error wraps it with the reason.
	ErrBadChange = errors.New("paxos: invalid membership change")
)
