package gossip

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// mlDelegate is memberlist.Delegate: it serves this node's metadata and
// takes the leaving notices of others.
type mlDelegate Membership

// NodeMeta implements memberlist.Delegate. It returns bytes encoded ahead
// of time and never more than limit (memberlist panics beyond it).
func (d *mlDelegate) NodeMeta(limit int) []byte {
	m := (*Membership)(d)
	m.metaMu.Lock()
	b := m.metaBytes
	m.metaMu.Unlock()
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg implements memberlist.Delegate: it takes the leaving notices
// of other members.
func (d *mlDelegate) NotifyMsg(b []byte) { (*Membership)(d).userMsg(b) }

// GetBroadcasts implements memberlist.Delegate; Membership has none.
func (d *mlDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate; Membership has no extra state.
func (d *mlDelegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (d *mlDelegate) MergeRemoteState(buf []byte, join bool) {}

// mlEvents is memberlist.EventDelegate.
type mlEvents Membership

// NotifyJoin implements memberlist.EventDelegate.
func (e *mlEvents) NotifyJoin(n *memberlist.Node) { (*Membership)(e).observe(EventJoin, n) }

// NotifyLeave implements memberlist.EventDelegate.
func (e *mlEvents) NotifyLeave(n *memberlist.Node) { (*Membership)(e).observe(EventLeave, n) }

// NotifyUpdate implements memberlist.EventDelegate.
func (e *mlEvents) NotifyUpdate(n *memberlist.Node) { (*Membership)(e).observe(EventUpdate, n) }

// mlPing is memberlist.PingDelegate: it records direct probe acks, the
// input of the StateSuspect heuristic.
type mlPing Membership

// AckPayload implements memberlist.PingDelegate.
func (p *mlPing) AckPayload() []byte { return nil }

// NotifyPingComplete implements memberlist.PingDelegate.
func (p *mlPing) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if other == nil {
		return
	}
	m := (*Membership)(p)
	now := time.Now()
	m.mu.Lock()
	if r := m.members[other.Name]; r != nil {
		r.lastAck = now
	}
	m.mu.Unlock()
}

// mlConflict is memberlist.ConflictDelegate: it logs two members claiming
// one name, which memberlist resolves by refusing the newcomer.
type mlConflict Membership

// NotifyConflict implements memberlist.ConflictDelegate.
func (c *mlConflict) NotifyConflict(existing, other *memberlist.Node) {
	if existing == nil || other == nil {
		return
	}
	(*Membership)(c).log.Warn("membership: name conflict: two members claim one name (names must be unique)",
		"name", existing.Name, "existing", existing.Address(), "other", other.Address())
}
