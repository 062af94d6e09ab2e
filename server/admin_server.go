package server

import (
	"io"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The admin endpoint's HTTP server is bounded like the client port: at
// most ConnLimits.AdminMaxConns connections at once (further ones wait in
// the kernel's backlog until one closes: netutil.LimitListener), a
// request must arrive within AdminReadTimeout and its answer leave within
// AdminWriteTimeout, and a keep-alive connection idle for
// AdminIdleTimeout is closed. So idle or stalled browsers, scrapers and
// scripts cannot hold the node's descriptors. The streaming answers
// (/events, /backup, a move's export) extend the write deadline as they
// write (streamWriter): a stream that keeps moving is never cut, one
// whose reader stalls is.

// adminHeaderTimeout bounds reading a request's headers.
const adminHeaderTimeout = 5 * time.Second

// adminServer returns the admin endpoint's server for handler h, and ln
// bounded to AdminMaxConns connections.
func (s *Server) adminServer(h http.Handler, ln net.Listener) (*http.Server, net.Listener) {
	l := s.cfg.ConnLimits
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminHeaderTimeout,
		ReadTimeout:       time.Duration(l.AdminReadTimeout),
		WriteTimeout:      time.Duration(l.AdminWriteTimeout),
		IdleTimeout:       time.Duration(l.AdminIdleTimeout),
	}
	return srv, netutil.LimitListener(ln, l.AdminMaxConns)
}

// streamWriter writes a streaming answer, extending the connection's
// write deadline by the admin write timeout before each write, so that
// AdminWriteTimeout bounds a stall, not the stream's length.
type streamWriter struct {
	w  io.Writer
	rc *http.ResponseController
	d  time.Duration
}

// newStreamWriter returns the streamWriter of w, whose writes extend the
// write deadline by d (the admin write timeout; 0: no deadline is set).
func newStreamWriter(w http.ResponseWriter, d time.Duration) *streamWriter {
	return &streamWriter{w: w, rc: http.NewResponseController(w), d: d}
}

// extend moves the write deadline d ahead of now.
func (sw *streamWriter) extend() {
	if sw.d > 0 {
		_ = sw.rc.SetWriteDeadline(time.Now().Add(sw.d)) // unsupported writers (tests' recorders) have none to extend
	}
}

// Write implements io.Writer.
func (sw *streamWriter) Write(p []byte) (int, error) {
	sw.extend()
	return sw.w.Write(p)
}

// Flush sends what is buffered to the client.
func (sw *streamWriter) Flush() error {
	sw.extend()
	return sw.rc.Flush()
}
