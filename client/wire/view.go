// This file holds the cluster view a node sends: which node masters each
// group and where the nodes are.

package wire

import (
	"github.com/vmihailenco/msgpack/v5"
)

// View is the cluster view: which node masters each group and where nodes
// listen for clients. Its version rises with every change; a client keeps
// the highest version it has seen and ignores older ones. The group count
// is len(Groups), and a key's group is GroupOf(KeyHash(ns, key),
// len(Groups)).
type View struct {
	// Version orders views.
	Version uint64
	// Groups lists every group, indexed by group number.
	Groups []GroupView
	// Nodes lists the cluster's members.
	Nodes []NodeView
}

// GroupView is one group's entry in a View.
type GroupView struct {
	// Master is the master's node id, 0 when the group has none.
	Master uint32
	// Addr is the master's client address, host:port ("" when none).
	Addr string
	// Epoch rises with every change of the group's master.
	Epoch uint64
}

// NodeView is one node's entry in a View.
type NodeView struct {
	// ID is the node id, nonzero.
	ID uint32
	// Addr is the node's client address, host:port.
	Addr string
	// Alive is the membership layer's opinion: a hint, not a promise.
	Alive bool
}

func (*View) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *View) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(3)
	w.uint(m.Version)
	w.array(len(m.Groups))
	for i := range m.Groups {
		g := &m.Groups[i]
		w.array(3)
		w.uint(uint64(g.Master))
		w.str(g.Addr)
		w.uint(g.Epoch)
	}
	w.array(len(m.Nodes))
	for i := range m.Nodes {
		n := &m.Nodes[i]
		w.array(3)
		w.uint(uint64(n.ID))
		w.str(n.Addr)
		w.boolean(n.Alive)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder. Lists longer than
// MaxViewGroups or MaxViewNodes are ErrMalformed.
func (m *View) DecodeMsgpack(d *msgpack.Decoder) error {
	*m = View{}
	f := readFields(d)
	m.Version = f.u64()
	if n := f.list(MaxViewGroups); n > 0 {
		m.Groups = make([]GroupView, n)
		for i := range m.Groups {
			g := readFields(d)
			m.Groups[i] = GroupView{Master: g.u32(), Addr: g.str(), Epoch: g.u64()}
			if err := g.done("View group"); err != nil {
				*m = View{}
				return err
			}
		}
	}
	if n := f.list(MaxViewNodes); n > 0 {
		m.Nodes = make([]NodeView, n)
		for i := range m.Nodes {
			g := readFields(d)
			m.Nodes[i] = NodeView{ID: g.u32(), Addr: g.str(), Alive: g.boolean()}
			if err := g.done("View node"); err != nil {
				*m = View{}
				return err
			}
		}
	}
	if err := f.done("View"); err != nil {
		*m = View{}
		return err
	}
	return nil
}

// GroupCount returns the number of groups, len(Groups).
func (m *View) GroupCount() int { return len(m.Groups) }

// MasterAddr returns the client address of group g's master, and false if
// g is out of range or the group has no master.
func (m *View) MasterAddr(g int) (string, bool) {
	if g < 0 || g >= len(m.Groups) || m.Groups[g].Master == 0 || m.Groups[g].Addr == "" {
		return "", false
	}
	return m.Groups[g].Addr, true
}

// ViewEpochShift splits the version of a view a registry serves from a
// registry's tables: the high bits are the namespace's assignment epoch
// (which rises when the namespace changes cluster), the low ViewEpochShift
// bits the cluster's own view version. A cluster's node serves epoch 0
// (its plain version), so versions keep rising for a client across an
// assignment change even when the new cluster's own version is lower.
const ViewEpochShift = 48

// RegistryViewVersion is the version a registry serves for a view of
// version v of the cluster a namespace of epoch epoch is assigned to: v
// itself for epoch 0, else epoch<<ViewEpochShift | v, with v saturated
// at the low bits' maximum.
func RegistryViewVersion(epoch, v uint64) uint64 {
	if epoch == 0 {
		return v
	}
	return epoch<<ViewEpochShift | min(v, 1<<ViewEpochShift-1)
}

// ViewEpoch is the assignment epoch of a view's version (see
// RegistryViewVersion): 0 for a view a cluster's node served.
func ViewEpoch(version uint64) uint64 { return version >> ViewEpochShift }
