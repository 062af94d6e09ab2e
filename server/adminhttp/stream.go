package adminhttp

import (
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The admin endpoint's HTTP server is bounded like the client port: at
// most Limits.MaxConns connections at once (further ones wait in the
// kernel's backlog until one closes: netutil.LimitListener), a request
// must arrive within ReadTimeout and its answer leave within
// WriteTimeout, and a keep-alive connection idle for IdleTimeout is
// closed. So idle or stalled browsers, scrapers and scripts cannot hold
// the node's descriptors. The streaming answers (/events, /backup, a
// move's export) extend the write deadline as they write (StreamWriter):
// a stream that keeps moving is never cut, one whose reader stalls is.

// headerTimeout bounds reading a request's headers, or ReadTimeout
// when that is shorter: half a request is closed within the read
// timeout, whichever part of it is missing.
const headerTimeout = 5 * time.Second

// Limits bound the admin endpoint's connections.
type Limits struct {
	MaxConns                               int
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

// NewServer returns the admin endpoint's server for handler h, and ln
// bounded to l.MaxConns connections.
func NewServer(h http.Handler, ln net.Listener, l Limits) (*http.Server, net.Listener) {
	header := headerTimeout
	if l.ReadTimeout > 0 {
		header = min(header, l.ReadTimeout)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: header,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
	return srv, netutil.LimitListener(ln, l.MaxConns)
}

// StreamWriter writes a streaming answer, extending the connection's
// write deadline by the admin write timeout before each write, so that
// the write timeout bounds a stall, not the stream's length.
type StreamWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

// NewStreamWriter returns the StreamWriter of w, whose writes extend the
// write deadline by d (the admin write timeout; 0: no deadline is set).
func NewStreamWriter(w http.ResponseWriter, d time.Duration) *StreamWriter {
	return &StreamWriter{w: w, rc: http.NewResponseController(w), d: d}
}

// extend moves the write deadline d ahead of now.
func (sw *StreamWriter) extend() {
	if sw.d > 0 {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.d)) // unsupported writers (tests' recorders) have none to extend
	}
}

// Write implements io.Writer.
func (sw *StreamWriter) Write(p []byte) (int, error) {
	sw.extend()
	return sw.w.Write(p)
}

// Flush sends what is buffered to the client.
func (sw *StreamWriter) Flush() error {
	sw.extend()
	return sw.rc.Flush()
}
