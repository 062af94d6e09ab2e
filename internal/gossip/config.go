package gossip

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// Timing tunes the gossip and failure detection. Zero fields take the
// defaults of memberlist.DefaultLANConfig (and the defaults noted here).
type Timing struct {
	// ProbeInterval is how often a member probes another (LAN: 1s).
	ProbeInterval time.Duration
	// ProbeTimeout is how long a probe waits for an ack (LAN: 500ms).
	ProbeTimeout time.Duration
	// GossipInterval is how often a member gossips (LAN: 200ms).
	GossipInterval time.Duration
	// PushPullInterval is how often members exchange full state (LAN: 30s).
	PushPullInterval time.Duration
	// TCPTimeout bounds a TCP exchange, joins included (LAN: 10s).
	TCPTimeout time.Duration
	// SuspicionMult scales how long a member stays suspected before it is
	// declared dead (LAN: 4).
	SuspicionMult int
	// DeadNodeReclaim is how long after a member died its name may come
	// back on another address, as after a restart on a new port (default
	// 10s; memberlist's own default never allows it).
	DeadNodeReclaim time.Duration
	// RejoinInterval is how often a member re-joins configured seeds that
	// are not live members, which also merges the two sides of a healed
	// partition (default 15s).
	RejoinInterval time.Duration
	// SuspectAfter marks a live member StateSuspect when this node's
	// direct probes have not been answered for this long (default: enough
	// probe rounds that a healthy member is always probed first, scaled by
	// memberlist's local health score).
	SuspectAfter time.Duration
	// DeadRetention is how long Members keeps reporting a dead or left
	// member (default 10m).
	DeadRetention time.Duration
}

// FastTiming returns timings for tests and single-host development: fast
// probes and gossip so that a few members on loopback converge in well
// under a second. Do not use it in production; under CPU starvation it
// declares healthy nodes dead.
func FastTiming() Timing {
	return Timing{
		ProbeInterval:    100 * time.Millisecond,
		ProbeTimeout:     50 * time.Millisecond,
		GossipInterval:   20 * time.Millisecond,
		PushPullInterval: 2 * time.Second,
		TCPTimeout:       2 * time.Second,
		SuspicionMult:    3,
		DeadNodeReclaim:  200 * time.Millisecond,
		RejoinInterval:   500 * time.Millisecond,
		DeadRetention:    time.Minute,
	}
}

// MembershipConfig configures a Membership.
type MembershipConfig struct {
	// NodeID is this node's id, nonzero. It is put in the metadata.
	NodeID uint32
	// Name is this node's memberlist name, unique in the cluster
	// (default DefaultName(NodeID)). memberlist's own default, the host
	// name, collides when several members share a host.
	Name string
	// Bind is the gossip address, host:port, for both TCP and UDP. Port 0
	// picks a free port (read it back with GossipAddr).
	Bind string
	// Advertise is the address other members reach this one at, if it
	// differs from Bind (NAT, or Bind on 0.0.0.0). Optional.
	Advertise string
	// Seeds are gossip addresses of other members to join. Start keeps
	// re-joining any that is not a live member every RejoinInterval.
	Seeds []string
	// Label names the cluster; members with different labels ignore each
	// other, so two clusters on one network never merge. Optional but
	// recommended (at most 255 bytes).
	Label string
	// SecretKey, if set, encrypts gossip with AES-GCM: 16, 24 or 32 bytes,
	// the same on every member. Members without it, or with another key,
	// cannot join or read the gossip.
	SecretKey []byte
	// OldSecretKeys are more keys (same sizes) that received gossip may be
	// encrypted with; SecretKey alone encrypts. They let a cluster rotate
	// its key with rolling restarts: every member first accepts the new
	// key, then switches to it, then drops the old one. Optional; ignored
	// without SecretKey.
	OldSecretKeys [][]byte
	// Meta provides this node's initial metadata; Start calls it once.
	// Later changes go through UpdateMeta. Optional.
	Meta func() NodeMeta
	// OnEvent, if set, receives every change in memberlist's order, on a
	// goroutine of its own (never inside memberlist's callbacks), so it may
	// call Members and even UpdateMeta. Later events wait while it runs, so
	// it should be quick; Stop waits for it to return.
	OnEvent func(Event)
	// Logger receives Membership's and memberlist's logs (default
	// slog.Default()).
	Logger *slog.Logger
	// Timing tunes failure detection; the zero value is memberlist's LAN
	// profile.
	Timing Timing
}

// DefaultName returns the memberlist name of node id: "paxlock-<id>".
func DefaultName(id uint32) string { return "paxlock-" + strconv.FormatUint(uint64(id), 10) }

func withTimingDefaults(t Timing) Timing {
	lan := memberlist.DefaultLANConfig()
	defaultDuration(&t.ProbeInterval, lan.ProbeInterval)
	defaultDuration(&t.ProbeTimeout, lan.ProbeTimeout)
	defaultDuration(&t.GossipInterval, lan.GossipInterval)
	defaultDuration(&t.PushPullInterval, lan.PushPullInterval)
	defaultDuration(&t.TCPTimeout, lan.TCPTimeout)
	if t.SuspicionMult <= 0 {
		t.SuspicionMult = lan.SuspicionMult
	}
	defaultDuration(&t.DeadNodeReclaim, 10*time.Second)
	defaultDuration(&t.RejoinInterval, 15*time.Second)
	defaultDuration(&t.DeadRetention, 10*time.Minute)
	return t
}

// defaultDuration sets *d to v when it is unset (zero or negative).
func defaultDuration(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

func splitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", port)
	}
	return host, p, nil
}
