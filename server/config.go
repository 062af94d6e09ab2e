package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/internal/pki"
	"github.com/paxlock/paxlock/paxos"
)

// Duration is a time.Duration that reads and writes as a string such as
// "30s" in JSON.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}

// NodeAddr is one member of the cluster as the configuration names it;
// /status reports the same (adminapi.NodeAddr).
type NodeAddr = adminapi.NodeAddr

// AdminTLS is the admin endpoint's HTTPS certificate and key (PEM files).
type AdminTLS struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

// ClientTLS is how the TLS client listener (client_tls_addr) asks
// clients for certificates.
type ClientTLS struct {
	// ClientCA names a PEM file of the CA certificates that sign client
	// certificates. The cluster CA (tls.ca) is trusted as well, for the
	// node certificates relaying nodes present.
	ClientCA string `json:"client_ca"`
	// ClientAuth is ClientAuthNone (the default: a certificate is
	// verified if sent, against the cluster CA only), ClientAuthOptional
	// (verified against client_ca and the cluster CA if sent) or
	// ClientAuthRequired (a handshake without a valid one is refused).
	ClientAuth string `json:"client_auth,omitempty"`
	// BindNamespace makes a client certificate a second factor bound to
	// a namespace: a client's session for namespace ns is accepted only
	// from a connection whose verified certificate names ns as the URI
	// paxlock-client:<ns> (internal/pki; paxlockctl certs client makes
	// such certificates), and only if its SCRAM exchange proves the
	// namespace's secret too. Sessions without a certificate naming the
	// namespace, on the plain client port as well, are refused
	// AUTH_FAILED. Relays prove themselves with node certificates and
	// are not affected.
	BindNamespace bool `json:"bind_namespace,omitempty"`
}

// The values of ClientTLS.ClientAuth.
const (
	// ClientAuthNone asks for no client certificate.
	ClientAuthNone = "none"
	// ClientAuthOptional verifies a client certificate when one is sent.
	ClientAuthOptional = "optional"
	// ClientAuthRequired refuses a TLS handshake without a valid client
	// certificate.
	ClientAuthRequired = "required"
)

// Namespace is a tenant and its secret.
type Namespace struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// Config is a node's configuration. Load reads it from a JSON file; flags
// override fields.
type Config struct {
	// NodeID is this node's id; it must appear in Nodes.
	NodeID uint32 `json:"node_id"`
	// Nodes lists every member, this one included.
	Nodes []NodeAddr `json:"nodes"`
	// Join says this node is being added to a running cluster (paxlockd
	// -join, which fills Nodes with the cluster's member list): a group
	// the store holds nothing of starts empty and takes a snapshot from
	// a member (host.ReplicaConfig.Join). Not read from the file.
	Join bool `json:"-"`
	// DataDir holds the node's Pebble database.
	DataDir string `json:"data_dir"`
	// DisableIOURing makes the store's fdatasync, and the WAL's writes, plain
	// blocking system calls. By default both go through io_uring where the
	// kernel allows it (see pebblestore.Options.BlockingSync), falling back
	// by itself where it does not.
	DisableIOURing bool `json:"disable_io_uring"`
	// DisableWALSpares turns off the zero-filled files the store keeps
	// ready for Pebble's next WAL (see pebblestore.Options.NoWALSpares):
	// worth it on a copy-on-write filesystem (btrfs, ZFS), where writing
	// over a file allocates anew anyway.
	DisableWALSpares bool `json:"disable_wal_spares"`
	// AdminAddr serves /status and /metrics over HTTP ("" disables it).
	AdminAddr string `json:"admin_addr"`
	// BindHost, if set, is the IP address the node's peer, client and
	// client TLS listeners bind (and gossip, advertising its entry's
	// address), with the ports of its own entry in Nodes; the entry's
	// hosts stay what other nodes and clients dial. 0.0.0.0 where those
	// hosts are names that resolve only once the node runs, as a
	// Kubernetes StatefulSet's pod names do. See NodeIDPlaceholder for
	// one file serving every node.
	BindHost string `json:"bind_host,omitempty"`
	// APIAddr serves the API (package apiserver: Connect, gRPC, gRPC-Web
	// and JSON over HTTP) at this address, over TLS with the node's
	// client certificate when the node has a tls section, in plaintext
	// (HTTP/1.1 and h2c) otherwise; "" serves none.
	APIAddr string `json:"api_addr,omitempty"`
	// ClusterName keeps clusters apart in gossip (default "paxlock").
	ClusterName string `json:"cluster_name"`
	// GossipTiming sets how fast gossip probes and spreads news:
	// GossipLAN (the default: memberlist's LAN settings, 200ms gossip, 1s
	// probes) or GossipLocal (every node on one host: 20ms gossip, 100ms
	// probes; under CPU starvation it declares healthy nodes dead).
	// Gossip is a hint for discovery and placement only, so a false
	// verdict moves placement hints and never a lock.
	GossipTiming string `json:"gossip_timing,omitempty"`
	// Namespaces are the tenants accepted at start; more can be added at
	// run time.
	Namespaces []Namespace `json:"namespaces"`

	// Groups and Workers size the lock service (defaults 15 and 8).
	Groups  int `json:"groups"`
	Workers int `json:"workers"`
	// Tick is the Paxos tick (default 10ms); Lease the master lease
	// (default 1s) and Heartbeat its renewal interval (default 250ms, at
	// most a quarter of the lease). The heartbeat sets how often an idle
	// node wakes; it does not set the failover time: a follower campaigns
	// a lease plus twice min(heartbeat, 100ms) after it last heard from
	// its master, and a master resends an unanswered Accept after
	// min(heartbeat, 100ms).
	Tick      Duration `json:"tick"`
	Lease     Duration `json:"lease"`
	Heartbeat Duration `json:"heartbeat"`
	// MaxDrift bounds clock-rate differences between nodes (default 0.01).
	MaxDrift float64 `json:"max_drift"`
	// DefaultTTL, MinTTL and MaxTTL bound lock TTLs.
	DefaultTTL Duration `json:"default_ttl"`
	MinTTL     Duration `json:"min_ttl"`
	MaxTTL     Duration `json:"max_ttl"`
	// WeightAging is the waiting time one unit of weight is worth in a
	// key's queue (default 1s, at most 1h): waiters are served in order of
	// arrival minus weight × weight_aging (see group.Config.WeightAging).
	WeightAging Duration `json:"weight_aging"`

	// MaxFrame bounds a client frame (default 1 MiB); MaxConns the client
	// connections (default 10000); MaxInflight a connection's outstanding
	// requests (default 4096).
	MaxFrame    int `json:"max_frame"`
	MaxConns    int `json:"max_conns"`
	MaxInflight int `json:"max_inflight"`
	// MaxOutput bounds the bytes of replies and pushes queued for one
	// client connection that the client does not read (default 16 MiB).
	// A connection past it is closed as a slow consumer (metric
	// paxlock_slow_consumers_total): its waits and watches are dropped,
	// its held locks expire unless renewed over another connection.
	MaxOutput int `json:"max_output"`
	// MaxWaitsPerConn and MaxWatchesPerConn bound the blocked acquires
	// and the watches one client connection may keep on this node's
	// masters, across keys and groups (defaults 10000 each);
	// MaxWaitsPerNamespace and MaxWatchesPerNamespace bound those of
	// one namespace on this node, all connections together (defaults
	// 100000 each). Beyond a bound a blocked acquire or a watch is
	// answered OVERLOADED with RetryAfterMs (the Go client retries it).
	// See group.Config.MaxConnWaits.
	MaxWaitsPerConn        int `json:"max_waits_per_conn"`
	MaxWatchesPerConn      int `json:"max_watches_per_conn"`
	MaxWaitsPerNamespace   int `json:"max_waits_per_namespace"`
	MaxWatchesPerNamespace int `json:"max_watches_per_namespace"`
	// MaxPrefixWatchesPerConn and MaxPrefixWatchesPerNamespace bound the
	// prefix watches (wire.FlagPrefix) of one connection and of one
	// namespace on this node, counted once per group a watch registers
	// with (defaults group.DefaultMaxConnPrefixWatches and
	// group.DefaultMaxNamespacePrefixWatches). Beyond a bound a prefix
	// watch is answered OVERLOADED. See group.Config.MaxConnPrefixWatches.
	MaxPrefixWatchesPerConn      int `json:"max_prefix_watches_per_conn"`
	MaxPrefixWatchesPerNamespace int `json:"max_prefix_watches_per_namespace"`
	// SessionLimits bound a namespace's sessions and what a request may
	// claim (config_session.go).
	SessionLimits
	// DrainTimeout bounds how long a stopping node waits for the groups it
	// masters to be served by its peers (default 10s; negative: it stops
	// without handing them over, and they fail over when their leases
	// run out). See Server.Shutdown.
	DrainTimeout Duration `json:"drain_timeout"`
	// IdleTimeout closes a client connection that sent nothing, not even a
	// heartbeat, for this long (default 2m).
	IdleTimeout Duration `json:"idle_timeout"`
	// LongHoldThreshold is how long a hold this node serves as master
	// must have been held (since its grant, or since this node took its
	// group over) to count in the paxlock_long_holds gauge (default
	// DefaultLongHoldThreshold; 0 disables the gauge).
	LongHoldThreshold *Duration `json:"long_hold_threshold,omitempty"`
	// EventLoops is the number of gnet event loops (default: one per
	// CPU), with client_listener gnet.
	EventLoops int `json:"event_loops"`
	// ClientListener chooses what serves the plain client port:
	// ListenerNetpoll (the default: a reader and a writer goroutine per
	// connection on Go's netpoller, the TLS listener's code without TLS)
	// or ListenerGnet (gnet's event loops; EventLoops applies to it).
	ClientListener string `json:"client_listener,omitempty"`
	// ForwardAfter is the redirect budget: a node that is not a group's
	// master forwards a request to the master itself, instead of
	// redirecting the client again, once the client has followed this
	// many redirects for it (default 2, as WLock's
	// client.redirect.maxtime). A client that cannot reach the master
	// asks any node to forward at once (wire.ForwardNow). Negative never
	// forwards.
	ForwardAfter int `json:"forward_after"`
	// InstanceWindow is how many Paxos instances a group's master keeps
	// in phase 2 at once (default 4; 1: while one is in flight,
	// everything proposed meanwhile rides in the next). See
	// paxos.Config.MaxInflight.
	InstanceWindow int `json:"instance_window"`
	// QuorumSync makes each group's master ask only a quorum of the
	// replicas (itself and quorum-1 followers) to fsync and vote on each
	// instance; the other followers write it without an fsync and vote
	// only when asked: a voter's vote is late, or a new master campaigns
	// (paxos.Config.QuorumSync; docs/design.md, "Rounds synced by exactly
	// a quorum"). Unset: paxos.DefaultQuorumSync. Nodes of mixed versions
	// may run it: a node that predates it votes on every instance.
	QuorumSync *bool `json:"quorum_sync,omitempty"`
	// TLS, if set, turns on mutual TLS 1.3 between the nodes (the peer
	// port): ca is the cluster CA's certificate (PEM), cert and key this
	// node's certificate and key. The certificate must name the node as
	// the URI paxlock://<cluster_name>/node/<node_id> (internal/pki;
	// paxlockctl certs makes such certificates). Without it the peer port
	// is plaintext, for trusted networks only, and the node logs a warning
	// at start. The files are read again when their contents change
	// (pki.ReloadInterval): a renewed certificate needs no restart.
	TLS *pki.Files `json:"tls,omitempty"`
	// ClientTLS, if set, has the TLS client listener ask clients for
	// certificates signed by its client_ca (mutual TLS to the client),
	// and may bind them to namespaces. It needs client_tls_addr.
	ClientTLS *ClientTLS `json:"client_tls,omitempty"`
	// RegistryNamespace makes this node serve the registry's tables
	// (group 0's, when this is a meta cluster) to registry processes: a
	// session authenticated to this namespace may send
	// SubscribeRegistry, which any other session is refused
	// (AUTH_FAILED): the tables hold every namespace's verifier. With
	// client_tls bind_namespace, such a session also needs a client
	// certificate naming the namespace. Unset: no session may subscribe.
	RegistryNamespace string `json:"registry_namespace,omitempty"`
	// RegistryLimits bound the registry's tables (config_registry.go).
	RegistryLimits
	// AuditKeep is how many audit records lock group 0 keeps (default
	// 10000, at most 1048576): each record this node proposes carries it,
	// and every replica trims the log to the bound of the record it
	// applies, so nodes configured differently still agree.
	AuditKeep int `json:"audit_keep,omitempty"`
	// AdminTLS, if set, serves the admin endpoint over HTTPS with its cert
	// and key; when both are empty, the node's tls cert and key are used.
	AdminTLS *AdminTLS `json:"admin_tls,omitempty"`
	// AdminTokenFile names a file holding the admin bearer token
	// (surrounding white space ignored); the environment variable
	// PAXLOCK_ADMIN_TOKEN, if set, is used instead. With a token, the
	// admin endpoint answers 401 without "Authorization: Bearer <token>",
	// except /healthz and /readyz, and /status, /metrics and GET
	// /namespaces when AdminPublicRead is set. Without a token the admin
	// endpoint is open to anyone who reaches it and the node logs a
	// warning at start.
	AdminTokenFile string `json:"admin_token_file,omitempty"`
	// RelaySecretFile names a file holding the cluster's relay secret
	// (surrounding white space ignored, at least MinRelaySecretLen
	// bytes, the same on every node); the environment variable
	// PAXLOCK_RELAY_SECRET, if set, is used instead. A node forwarding a
	// client's request to its group's master (a relay) must prove that
	// it is a node of the cluster: with peer TLS its node certificate
	// does, on the master's TLS client listener, and the secret is not
	// used; without peer TLS it proves this secret with SCRAM. Without
	// peer TLS and without the secret, nodes neither accept nor open
	// relays: they redirect clients instead, and a client that cannot
	// reach a group's master cannot use it.
	RelaySecretFile string `json:"relay_secret_file,omitempty"`
	// AdminPublicRead lets /status, /metrics and GET /namespaces be read
	// without the token (default false). /healthz and /readyz never need
	// it.
	AdminPublicRead bool `json:"admin_public_read,omitempty"`
	// AdminAllowedHosts are further host names (without port) the admin
	// endpoint answers to, in the Host header of a request: the names a
	// Docker Compose service, a Kubernetes service or a load balancer
	// reaches it by. IP literals, localhost, *.localhost, admin_addr's
	// host and the hosts of the nodes' addresses are always allowed;
	// "*" allows any (turning off the check against DNS rebinding, by
	// which a web page the operator opens reads the endpoint under its
	// own name). Another Host is answered 403.
	AdminAllowedHosts []string `json:"admin_allowed_hosts,omitempty"`
	// GossipKey encrypts and authenticates gossip (memberlist's AES-GCM):
	// 32 bytes, base64. GossipKeyFile names a file holding it instead.
	// GossipOldKeys are further keys (base64) accepted on receipt, for
	// rotation: see docs/security.md, "Rotating the gossip key". Without a key,
	// gossip is plaintext and anyone who reaches the gossip port can join.
	GossipKey     string   `json:"gossip_key,omitempty"`
	GossipKeyFile string   `json:"gossip_key_file,omitempty"`
	GossipOldKeys []string `json:"gossip_old_keys,omitempty"`
	// FaultInjection enables the admin endpoint /debug/partition, which
	// cuts this node's Paxos traffic to and from chosen peers (make e2e
	// uses it to partition nodes). Never enable it in production.
	FaultInjection bool `json:"fault_injection"`
	// ConnLimits are the bounds on connections before and around
	// authentication, TLS handshakes, the admin endpoint's and the peer
	// port's connections (config_limits.go).
	ConnLimits
	// Memory sizes the Go heap's soft limit and Pebble's memtable and
	// cache (config_memory.go).
	Memory
	// ConsensusLimits bound what the consensus core takes from a peer
	// (config_consensus.go).
	ConsensusLimits
	// Tracing configures OpenTelemetry spans and their OTLP exporter
	// (tracing.go); off by default.
	Tracing Tracing `json:"tracing,omitzero"`
	// TracerProvider, when set, is the tracer provider the node's spans
	// go to instead of Tracing's exporter (an embedder's, or a test's
	// in-memory recorder); the embedder shuts it down.
	TracerProvider trace.TracerProvider `json:"-"`

	// storeFS, when set, is the filesystem the store uses (tests inject
	// storage faults with it).
	storeFS vfs.FS
	// clientTLSOff serves client_tls_addr without TLS, on the same
	// goroutines (benchmarks: TLS's own cost).
	clientTLSOff bool
	// wrapClientListener, when set, wraps the goroutine client listeners'
	// net.Listener (tests inject failing accepts with it).
	wrapClientListener func(net.Listener) net.Listener

	// hooks are the package tests' fault knobs for this node's cluster
	// (testhooks.go); nil in production.
	hooks *testHooks
}

// Load reads a JSON configuration file. A key that names no setting is an
// error that names it (a misspelt key would otherwise be ignored and its
// setting left at its default), and so is anything after the object.
func Load(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config: %w", err)
	}
	if err := DecodeStrict(b, &c); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// DecodeStrict decodes the single JSON value in b into v, refusing keys
// that match no field of v and anything after the value.
func DecodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

// Check reports whether c could start a node, as New would judge it:
// defaults filled in, then Validate, then the certificates, keys and
// token it names loaded and checked. c itself is not changed.
func (c Config) Check() error {
	c.Nodes = append([]NodeAddr(nil), c.Nodes...)
	c.EnsureDefaults()
	if err := c.Validate(); err != nil {
		return err
	}
	_, err := loadSecurity(&c, slog.New(slog.DiscardHandler))
	return err
}

// Redacted is what LogValue shows in place of a namespace's secret or a
// gossip key.
const Redacted = "[redacted]"

// LogValue implements slog.LogValuer: the configuration as JSON with every
// namespace secret (and the tracing exporter's header values, which
// carry API keys) replaced by Redacted, so that logging a Config never
// reveals a secret.
func (c Config) LogValue() slog.Value {
	c.Namespaces = append([]Namespace(nil), c.Namespaces...)
	for i := range c.Namespaces {
		if c.Namespaces[i].Secret != "" {
			c.Namespaces[i].Secret = Redacted
		}
	}
	if c.GossipKey != "" {
		c.GossipKey = Redacted
	}
	if len(c.GossipOldKeys) > 0 {
		c.GossipOldKeys = []string{Redacted}
	}
	c.Tracing = c.Tracing.redacted()
	b, err := json.Marshal(c)
	if err != nil {
		return slog.StringValue("unprintable config: " + err.Error())
	}
	return slog.AnyValue(json.RawMessage(b))
}

// The client listeners Config.ClientListener names.
const (
	// ListenerGnet serves the client port with gnet's event loops.
	ListenerGnet = "gnet"
	// ListenerNetpoll serves the client port with goroutines on Go's
	// netpoller, as the TLS listener does.
	ListenerNetpoll = "netpoll"
)

// The gossip timings Config.GossipTiming names.
const (
	// GossipLAN is memberlist's LAN timing: nodes on a network.
	GossipLAN = "lan"
	// GossipLocal is for nodes sharing one host (development, tests):
	// news spreads in tens of milliseconds, so joins, leaves and
	// shutdowns settle ten times sooner.
	GossipLocal = "local"
)

// self returns this node's addresses.
func (c *Config) self() NodeAddr {
	for _, n := range c.Nodes {
		if n.ID == c.NodeID {
			return n
		}
	}
	return NodeAddr{}
}

// quorumSync reports whether the node's groups sync each instance on
// exactly a quorum: the setting, or paxos.DefaultQuorumSync when unset.
func (c *Config) quorumSync() bool {
	if c.QuorumSync == nil {
		return paxos.DefaultQuorumSync
	}
	return *c.QuorumSync
}
