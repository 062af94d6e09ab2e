package server

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Accept loops that outlive a descriptor storm. An accept that fails
// (EMFILE, ENFILE, ENOBUFS, ECONNABORTED, a timeout, or anything else but
// the listener's closing) is retried after a pause that starts at
// acceptBackoffMin and doubles to acceptBackoffMax, as net/http's Serve
// does, and the loop returns only when the listener is closed. While the
// last accept failed and none succeeded since, the listener is "not
// accepting": /readyz fails with the error (listenerHealth), and every
// failure is counted (paxlock_accept_errors_total).

const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// listenerHealth is one client listener's accept state.
type listenerHealth struct {
	name    string
	failing atomic.Pointer[string] // the last accept error while not accepting; nil while accepting
	errors  atomic.Uint64          // failed accepts
}

// fail records a failed accept.
func (h *listenerHealth) fail(err error) {
	h.errors.Add(1)
	msg := err.Error()
	h.failing.Store(&msg)
}

// ok records a successful accept.
func (h *listenerHealth) ok() {
	if h.failing.Load() != nil {
		h.failing.Store(nil)
	}
}

// listeners holds the node's client listeners' health, by name.
type listeners struct {
	mu   sync.Mutex
	list []*listenerHealth
}

// add registers a listener named name and returns its health.
func (l *listeners) add(name string) *listenerHealth {
	h := &listenerHealth{name: name}
	l.mu.Lock()
	l.list = append(l.list, h)
	l.mu.Unlock()
	return h
}

// all returns the registered listeners.
func (l *listeners) all() []*listenerHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*listenerHealth(nil), l.list...)
}

// notAccepting returns the reason /readyz fails for the first client
// listener that is not accepting ("" if all are).
func (l *listeners) notAccepting() string {
	for _, h := range l.all() {
		if e := h.failing.Load(); e != nil {
			return "client listener \"" + h.name + "\" not accepting: " + *e
		}
	}
	return ""
}

// acceptLoop accepts connections on ln and hands each to serve until ln
// is closed or the node's life ends; serve reports false to stop (the
// node is shutting down). Failed accepts are retried with backoff and
// recorded in h.
func (s *Server) acceptLoop(ln net.Listener, h *listenerHealth, serve func(net.Conn) bool) {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.life.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			h.fail(err)
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			s.log.Error(h.name+" listener: accept failed; retrying", "err", err, "retry_in", delay)
			t := time.NewTimer(delay)
			select {
			case <-s.life.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		delay = 0
		h.ok()
		if !serve(nc) {
			_ = nc.Close()
			return
		}
	}
}

// handshakeSlots bounds the TLS handshakes under way on a listener: a
// connection that finds none free is closed at once (counted in
// refused), so that a flood of handshakes cannot hold descriptors and CPU
// beyond the bound.
type handshakeSlots struct {
	sem     chan struct{}
	refused atomic.Uint64
}

func newHandshakeSlots(n int) *handshakeSlots {
	return &handshakeSlots{sem: make(chan struct{}, n)}
}

// acquire takes a slot if one is free.
func (h *handshakeSlots) acquire() bool {
	select {
	case h.sem <- struct{}{}:
		return true
	default:
		h.refused.Add(1)
		return false
	}
}

// release frees a slot acquire took.
func (h *handshakeSlots) release() { <-h.sem }
