package server

import (
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/session"
	"github.com/paxlock/paxlock/group"
)

// SessionLimits are the bounds of what one namespace's sessions, and one
// request, may take of a node (Config embeds them; their JSON keys sit
// with the others).
type SessionLimits struct {
	// MaxConnsPerNamespace bounds the client sessions (accepted
	// handshakes, relays' not counted: the relaying node bounds its own
	// clients) one namespace may hold open on this node (default 2000).
	// A handshake beyond it is answered OVERLOADED with RetryAfterMs at
	// its first message, before any secret is checked; the connection
	// stays open for another try.
	MaxConnsPerNamespace int `json:"max_conns_per_namespace"`
	// MaxWaited bounds the time a re-sent blocking acquire may claim it
	// has already waited at an earlier master (wire.Acquire.WaitedMs),
	// which moves it ahead in the key's queue (default 10m; see
	// group.Config.MaxWaited).
	MaxWaited Duration `json:"max_waited"`
	// MaxHoldersPerKey bounds the holders of one key: the readers of a
	// read lock, the holders of a semaphore (default 1024; see
	// group.Config.MaxHoldersPerKey).
	MaxHoldersPerKey int `json:"max_holders_per_key"`
}

// The defaults of SessionLimits.
const (
	DefaultMaxConnsPerNamespace = 2000
)

// ensureDefaults fills the unset limits.
func (l *SessionLimits) ensureDefaults() {
	if l.MaxConnsPerNamespace <= 0 {
		l.MaxConnsPerNamespace = DefaultMaxConnsPerNamespace
	}
	if l.MaxWaited <= 0 {
		l.MaxWaited = Duration(group.DefaultMaxWaited)
	}
	if l.MaxHoldersPerKey <= 0 {
		l.MaxHoldersPerKey = group.DefaultMaxHoldersPerKey
	}
}

// nsConns counts the client sessions of each namespace on this node
// (SessionLimits.MaxConnsPerNamespace). A session is counted from its
// accepted handshake until it closes or a later handshake names another
// namespace.
type nsConns struct {
	mu sync.Mutex
	n  map[string]int
}

// counted reports whether id is a session nsConns counts: a client's,
// not a relay's.
func counted(id session.Identity) bool { return id.ClientID != 0 && id.Via == 0 }

// move counts a session that was prev (the zero Identity: none) and is
// cur (the zero Identity: closed).
func (c *nsConns) move(prev, cur session.Identity) {
	if counted(prev) == counted(cur) && prev.Namespace == cur.Namespace {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if counted(prev) {
		if c.n[prev.Namespace]--; c.n[prev.Namespace] <= 0 {
			delete(c.n, prev.Namespace)
		}
	}
	if counted(cur) {
		if c.n == nil {
			c.n = make(map[string]int)
		}
		c.n[cur.Namespace]++
	}
}

// full reports whether namespace ns has max sessions already.
func (c *nsConns) full(ns string, max int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[ns] >= max
}

// nsConnsRetry is the RetryAfterMs of a handshake refused by
// MaxConnsPerNamespace: room comes back as the namespace's connections
// close.
const nsConnsRetry = 500 * time.Millisecond
