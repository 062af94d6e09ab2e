package server

import "time"

// ConnLimits are the bounds that keep a node serving when its network
// misbehaves: connections that never authenticate, floods of TLS
// handshakes, idle admin keep-alives, idle or surplus peer connections.
// Config embeds it: its keys sit at the top level of the configuration.
// Every unset (zero) field takes its default (setDefaults).
type ConnLimits struct {
	// PreAuthMaxFrame bounds a client frame before the connection's
	// handshake is accepted (default 64 KiB, at most max_frame): a larger
	// frame closes the connection (paxlock_bad_frames_total). A Hello and
	// the SCRAM messages are far smaller.
	PreAuthMaxFrame int `json:"preauth_max_frame"`
	// PreAuthMaxOutput bounds the replies and pushes queued, unread, for
	// a connection not yet authenticated (default 256 KiB, at most
	// max_output): past it the connection is closed as a slow consumer
	// (paxlock_slow_consumers_total). GetView, SubscribeView and
	// Heartbeat are served before authentication; pipelined and never
	// read, they stop here.
	PreAuthMaxOutput int `json:"preauth_max_output"`
	// MaxOutputTotal bounds the replies and pushes queued, unread, for
	// all the node's client connections together (default 1 GiB: 64
	// connections at max_output, 4,096 unauthenticated ones at
	// preauth_max_output, where max_conns × max_output would be 160 GiB).
	// When queuing takes the node past it, the connections holding the
	// most beyond their fair share (max_output_total over the open
	// connections) are closed as slow consumers
	// (paxlock_output_budget_closes_total, and
	// paxlock_slow_consumers_total); paxlock_output_queued_bytes is the
	// output queued now.
	MaxOutputTotal int64 `json:"max_output_total"`
	// AuthTimeout is how long a client connection may stay
	// unauthenticated (default 10s): one whose handshake is not accepted
	// by then is closed, heartbeats or not (paxlock_auth_timeouts_total).
	// A relaying node's connection, authenticated by its certificate,
	// counts as authenticated from the TLS handshake.
	AuthTimeout Duration `json:"auth_timeout"`
	// MaxTLSHandshakes bounds the TLS handshakes under way at once on the
	// TLS client listener, and on the peer port (default 256): a
	// connection beyond it is closed at once
	// (paxlock_tls_handshakes_refused_total). The max_conns check comes
	// before the handshake.
	MaxTLSHandshakes int `json:"max_tls_handshakes"`
	// AdminMaxConns bounds the admin endpoint's open connections (default
	// 256): more wait in the listen backlog until one closes.
	AdminMaxConns int `json:"admin_max_conns"`
	// AdminReadTimeout bounds reading one admin request, body included
	// (default 30s); AdminWriteTimeout writing its answer (default 60s;
	// /backup, which streams, extends it as it writes); AdminIdleTimeout
	// closes an admin keep-alive connection idle that long (default 2m).
	AdminReadTimeout  Duration `json:"admin_read_timeout"`
	AdminWriteTimeout Duration `json:"admin_write_timeout"`
	AdminIdleTimeout  Duration `json:"admin_idle_timeout"`
	// PeerIdleTimeout closes an inbound peer connection that sends
	// nothing for this long after its handshake (default 2m; a peer with
	// nothing to send, which masters none of the groups this node
	// follows, dials again when it has). MaxPeerConnsPerNode bounds the
	// inbound peer connections that claim one node id (default 4): a
	// further one closes the oldest, so that a peer that redials is never
	// locked out by connections it abandoned. max_tls_handshakes bounds
	// the peer port's handshakes under way too.
	PeerIdleTimeout     Duration `json:"peer_idle_timeout"`
	MaxPeerConnsPerNode int      `json:"max_peer_conns_per_node"`
}

// setDefaults fills the unset limits; maxFrame and maxOutput are the
// node's max_frame and max_output, which the pre-authentication bounds
// never exceed.
func (l *ConnLimits) setDefaults(maxFrame, maxOutput int) {
	if l.PreAuthMaxFrame <= 0 {
		l.PreAuthMaxFrame = 64 << 10
	}
	l.PreAuthMaxFrame = min(l.PreAuthMaxFrame, maxFrame)
	if l.PreAuthMaxOutput <= 0 {
		l.PreAuthMaxOutput = 256 << 10
	}
	l.PreAuthMaxOutput = min(l.PreAuthMaxOutput, maxOutput)
	if l.MaxOutputTotal <= 0 {
		l.MaxOutputTotal = 1 << 30
	}
	setDuration(&l.AuthTimeout, 10*time.Second)
	if l.MaxTLSHandshakes <= 0 {
		l.MaxTLSHandshakes = 256
	}
	if l.AdminMaxConns <= 0 {
		l.AdminMaxConns = 256
	}
	setDuration(&l.AdminReadTimeout, 30*time.Second)
	setDuration(&l.AdminWriteTimeout, time.Minute)
	setDuration(&l.AdminIdleTimeout, 2*time.Minute)
	setDuration(&l.PeerIdleTimeout, 2*time.Minute)
	if l.MaxPeerConnsPerNode <= 0 {
		l.MaxPeerConnsPerNode = 4
	}
}

func setDuration(d *Duration, def time.Duration) {
	if *d <= 0 {
		*d = Duration(def)
	}
}
