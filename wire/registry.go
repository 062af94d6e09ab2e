// This file holds the registry's tables as a meta cluster's node serves
// them to registry processes: SubscribeRegistry, RegistryTables and
// RegistryChanged.

package wire

import (
	"github.com/vmihailenco/msgpack/v5"
)

// Limits on RegistryTables' lists, checked when one is decoded.
const (
	// MaxRegistryClusters is the most clusters the tables may list.
	MaxRegistryClusters = 4096
	// MaxRegistryNamespaces is the most namespaces the tables may list.
	MaxRegistryNamespaces = 1 << 20
	// MaxRegistryAddrs is the most addresses of one cluster's list.
	MaxRegistryAddrs = 64
)

// SubscribeRegistry asks a meta cluster's node for the registry's tables
// and for every later change of them. Only a session the node's
// configuration designates (its registry namespace) may ask: they hold
// the namespaces' verifiers. Reply: a RegistryTables frame (or a Response
// AUTH_FAILED or BAD_REQUEST); then a RegistryChanged push whenever the
// tables change, until the connection closes.
type SubscribeRegistry struct {
	// Version is the version of the tables the subscriber has (0: none).
	// When the node's are that version, the reply says Unchanged and
	// carries no tables.
	Version uint64
}

func (*SubscribeRegistry) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *SubscribeRegistry) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(1)
	w.uint(m.Version)
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *SubscribeRegistry) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	m.Version = f.u64()
	return f.done("SubscribeRegistry")
}

// Validate always succeeds.
func (*SubscribeRegistry) Validate() error { return nil }

// RegistryTables is the registry's tables at one version: the reply to
// SubscribeRegistry and the body of the RegistryChanged push. Versions
// only rise; a subscriber ignores tables older than the ones it has (a
// node may serve a replica that is behind another node's).
type RegistryTables struct {
	// Version rises with every change of the tables.
	Version uint64
	// Unchanged (a reply only) says the subscriber's version is the
	// node's: the lists are empty and the subscriber keeps its tables.
	Unchanged  bool
	Clusters   []RegistryCluster
	Namespaces []RegistryNamespace
	Moves      []RegistryMove
}

// RegistryCluster is a lock cluster of the registry.
type RegistryCluster struct {
	Name string
	// Client and Admin list the nodes' client and admin addresses.
	Client, Admin []string
	// CA is the PEM CA certificate of the cluster's admin HTTPS, "" for
	// plain HTTP.
	CA string
}

// RegistryNamespace is a namespace's assignment to a cluster, with the
// namespace's SCRAM-SHA-256 verifier.
type RegistryNamespace struct {
	Name, Cluster string
	// Epoch rises with every change of the namespace's cluster.
	Epoch uint64
	// Iters, Salt, StoredKey and ServerKey are the verifier.
	Iters                      uint32
	Salt, StoredKey, ServerKey string
}

// RegistryMove is a namespace move in progress (or finished and not yet
// forgotten).
type RegistryMove struct {
	Namespace, From, To string
	ID                  uint64
	State               uint8
	Step                uint64
	Token               uint64
}

func (*RegistryTables) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *RegistryTables) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	w.array(5)
	w.uint(m.Version)
	w.boolean(m.Unchanged)
	w.array(len(m.Clusters))
	for i := range m.Clusters {
		c := &m.Clusters[i]
		w.array(4)
		w.str(c.Name)
		for _, l := range [][]string{c.Client, c.Admin} {
			w.array(len(l))
			for _, a := range l {
				w.str(a)
			}
		}
		w.str(c.CA)
	}
	w.array(len(m.Namespaces))
	for i := range m.Namespaces {
		n := &m.Namespaces[i]
		w.array(7)
		w.str(n.Name)
		w.str(n.Cluster)
		w.uint(n.Epoch)
		w.uint(uint64(n.Iters))
		w.bin(n.Salt)
		w.bin(n.StoredKey)
		w.bin(n.ServerKey)
	}
	w.array(len(m.Moves))
	for i := range m.Moves {
		v := &m.Moves[i]
		w.array(7)
		w.str(v.Namespace)
		w.str(v.From)
		w.str(v.To)
		w.uint(v.ID)
		w.uint(uint64(v.State))
		w.uint(v.Step)
		w.uint(v.Token)
	}
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder. Lists over the
// MaxRegistry limits are ErrMalformed.
func (m *RegistryTables) DecodeMsgpack(d *msgpack.Decoder) error {
	*m = RegistryTables{}
	err := m.decode(d)
	if err != nil {
		*m = RegistryTables{}
	}
	return err
}

func (m *RegistryTables) decode(d *msgpack.Decoder) error {
	f := readFields(d)
	m.Version = f.u64()
	m.Unchanged = f.boolean()
	if n := f.list(MaxRegistryClusters); n > 0 {
		m.Clusters = make([]RegistryCluster, n)
		for i := range m.Clusters {
			g := readFields(d)
			c := &m.Clusters[i]
			c.Name = g.str()
			c.Client = g.strList()
			c.Admin = g.strList()
			c.CA = g.str()
			if err := g.done("RegistryTables cluster"); err != nil {
				return err
			}
		}
	}
	if n := f.list(MaxRegistryNamespaces); n > 0 {
		m.Namespaces = make([]RegistryNamespace, n)
		for i := range m.Namespaces {
			g := readFields(d)
			ns := &m.Namespaces[i]
			ns.Name, ns.Cluster, ns.Epoch, ns.Iters = g.str(), g.str(), g.u64(), g.u32()
			ns.Salt, _ = g.bin()
			ns.StoredKey, _ = g.bin()
			ns.ServerKey, _ = g.bin()
			if err := g.done("RegistryTables namespace"); err != nil {
				return err
			}
		}
	}
	if n := f.list(MaxRegistryNamespaces); n > 0 {
		m.Moves = make([]RegistryMove, n)
		for i := range m.Moves {
			g := readFields(d)
			v := &m.Moves[i]
			v.Namespace, v.From, v.To = g.str(), g.str(), g.str()
			v.ID, v.State, v.Step, v.Token = g.u64(), g.u8(), g.u64(), g.u64()
			if err := g.done("RegistryTables move"); err != nil {
				return err
			}
		}
	}
	return f.done("RegistryTables")
}

// strList reads a list of strings of at most MaxRegistryAddrs.
func (f *fieldReader) strList() []string {
	n := f.list(MaxRegistryAddrs)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, f.elemStr())
	}
	return out
}

// MaxRegistryFrame bounds a RegistryTables frame, header included: the
// tables travel whole, and a meta cluster's node and a registry process
// both accept frames of this size on a registry subscription.
const MaxRegistryFrame = 64 << 20
