package gossip

import (
	"strconv"
	"time"
)

// State is a member's state as this node sees it. It is a hint (see the
// package documentation).
type State uint8

// Member states.
const (
	// StateAlive: memberlist lists the member and this node's own probes
	// of it have been answered recently.
	StateAlive State = iota + 1
	// StateSuspect: memberlist still lists the member, but this node's
	// direct probes of it have not been answered for longer than
	// Timing.SuspectAfter. memberlist v0.7.0 keeps its own suspicion
	// private, so this is Membership's local heuristic: the member may be
	// slow, paused, or reachable only through other nodes. It often clears
	// by itself.
	StateSuspect
	// StateDead: memberlist declared the member failed (it stopped
	// answering, or crashed without leaving).
	StateDead
	// StateLeft: the member announced that it was leaving.
	StateLeft
)

// String returns alive, suspect, dead, left or State(N).
func (s State) String() string {
	switch s {
	case StateAlive:
		return "alive"
	case StateSuspect:
		return "suspect"
	case StateDead:
		return "dead"
	case StateLeft:
		return "left"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Live reports whether memberlist still counts the member: StateAlive or
// StateSuspect.
func (s State) Live() bool { return s == StateAlive || s == StateSuspect }

// Member is one node as this node's membership sees it. The embedded
// NodeMeta is the member's last gossiped metadata (zero if it did not
// decode; see MetaErr).
type Member struct {
	NodeMeta
	// Name is the member's unique memberlist name.
	Name string
	// GossipAddr is the member's memberlist address, ip:port.
	GossipAddr string
	// State is the member's state.
	State State
	// Since is when State last changed, on this node's clock.
	Since time.Time
	// Local marks this node's own entry.
	Local bool
	// MetaErr is the error decoding the member's metadata (a member of
	// another version or another program), or nil.
	MetaErr error
}

// EventKind says what changed in an Event.
type EventKind uint8

// Event kinds.
const (
	// EventJoin: a member appeared, or came back after it died or left.
	EventJoin EventKind = iota + 1
	// EventLeave: a member died (StateDead) or left (StateLeft).
	EventLeave
	// EventUpdate: a member's metadata or address changed, or it said it
	// is leaving (which may turn StateDead into StateLeft).
	EventUpdate
	// EventSuspect: a member became StateSuspect.
	EventSuspect
	// EventRecover: a suspect member answered again (StateAlive).
	EventRecover
)

// String returns join, leave, update, suspect, recover or EventKind(N).
func (k EventKind) String() string {
	switch k {
	case EventJoin:
		return "join"
	case EventLeave:
		return "leave"
	case EventUpdate:
		return "update"
	case EventSuspect:
		return "suspect"
	case EventRecover:
		return "recover"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one membership change, with the member as it was right after.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Member is the member after the change.
	Member Member
}
