// This file holds the registry's tables as a meta cluster's node serves
// them to registry processes: SubscribeRegistry, RegistryTables and
// RegistryChanged.

package wire

import (
	"fmt"

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
	// carries no tables. With Page above 0 it is instead the version
	// being paged.
	Version uint64
	// Paged asks for the tables in pages (RegistryTables.Paged) and for
	// pushes that only announce a new version. Without it (a subscriber
	// of an earlier protocol) the tables travel whole in one frame, and
	// a node whose tables do not fit MaxRegistryFrame answers ERROR.
	Paged bool
	// Page, above 0, asks for that page of the version the node serves
	// this subscriber: the one whose page 0 it last answered. A page of
	// any other version is refused BAD_REQUEST.
	Page uint32
}

func (*SubscribeRegistry) wireMessage() {}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (m *SubscribeRegistry) EncodeMsgpack(e *msgpack.Encoder) error {
	w := fieldWriter{e: e}
	if !m.Paged && m.Page == 0 {
		w.array(1) // the earlier protocol's form
		w.uint(m.Version)
		return w.err
	}
	w.array(3)
	w.uint(m.Version)
	w.boolean(m.Paged)
	w.uint(uint64(m.Page))
	return w.err
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (m *SubscribeRegistry) DecodeMsgpack(d *msgpack.Decoder) error {
	f := readFields(d)
	m.Version = f.u64()
	m.Paged = f.boolean()
	m.Page = f.u32()
	return f.done("SubscribeRegistry")
}

// Validate refuses a page asked for without Paged.
func (m *SubscribeRegistry) Validate() error {
	if m.Page > 0 && !m.Paged {
		return fmt.Errorf("%w: SubscribeRegistry: a page needs Paged", ErrInvalid)
	}
	return nil
}

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
	// Paged (sent only to a subscriber that asked for pages) says the
	// lists are page Page of the tables at Version, under
	// RegistryPageBytes; More says pages follow, to be asked for with
	// SubscribeRegistry{Version, Paged, Page+1}. Pages list clusters,
	// then namespaces, then moves, each by ascending name, so that the
	// pages of one version concatenate to its tables (RegistryAssembly).
	// A RegistryChanged push that is Paged carries no lists: it announces
	// Version, whose pages the subscriber then asks for from page 0.
	Paged bool
	Page  uint32
	More  bool
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
	if m.Paged || m.Page != 0 || m.More {
		w.array(8)
	} else {
		w.array(5) // the earlier protocol's form
	}
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
	if m.Paged || m.Page != 0 || m.More {
		w.boolean(m.Paged)
		w.uint(uint64(m.Page))
		w.boolean(m.More)
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
	m.Paged, m.Page, m.More = f.boolean(), f.u32(), f.boolean()
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

// MaxRegistryFrame bounds a RegistryTables frame of the earlier,
// unpaged protocol, header included: there the tables travel whole, and a
// registry process still accepts frames of this size from a meta node
// that does not page them (a rolling upgrade). A paged frame stays under
// RegistryPageBytes plus its header.
const MaxRegistryFrame = 64 << 20
