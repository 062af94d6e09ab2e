package apiserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/paxlock/paxlock/internal/rawio"
	"golang.org/x/net/netutil"
)

// TLSNode is a Node whose client listener may be TLS: the listener then
// serves the API over TLS with the same configuration.
type TLSNode interface {
	Node
	// ClientTLSConfig is the TLS client listener's configuration, nil
	// when the node's client port is plaintext.
	ClientTLSConfig() *tls.Config
}

// Listener serves a Service over HTTP at one address: TLS (HTTP/1.1 and
// HTTP/2, the node's certificate and client certificate policy) when the
// node has a certificate, else plaintext HTTP/1.1 and HTTP/2 without TLS
// (h2c), for gRPC clients.
type Listener struct {
	svc  *Service
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	err  error // why Serve returned, once done is closed
}

// HTTP bounds: a request's headers (slowloris), an idle connection's
// life, and the connections open at once (past it, accepts wait).
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	defaultMaxConns   = 10000
)

// Listen serves a Service of node at addr in the background until
// Shutdown.
func Listen(node TLSNode, addr string, o Options) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("apiserver: listen: %w", err)
	}
	if o.MaxConns <= 0 {
		o.MaxConns = defaultMaxConns
	}
	svc := New(node, o)
	path, h := svc.Handler()
	mux := http.NewServeMux()
	mux.Handle(path, h)
	l := &Listener{svc: svc, ln: ln, done: make(chan struct{})}
	ln = netutil.LimitListener(rawio.Listener(ln), o.MaxConns)
	// The HTTP server's own complaints (failed TLS handshakes, bad
	// requests) are the caller's errors: debug level.
	errLog := slog.NewLogLogger(svc.log.Handler(), slog.LevelDebug)
	l.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout, ErrorLog: errLog}
	var p http.Protocols
	p.SetHTTP1(true)
	if base := node.ClientTLSConfig(); base != nil {
		p.SetHTTP2(true)
		l.srv.TLSConfig = withALPN(base)
		ln = tls.NewListener(ln, l.srv.TLSConfig)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	l.srv.Protocols = &p
	go func() {
		defer close(l.done)
		if err := l.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			l.err = err
			svc.log.Error("api listener stopped", "addr", l.Addr(), "err", err)
		}
	}()
	return l, nil
}

// withALPN is base with HTTP/2 and HTTP/1.1 offered in ALPN, also in the
// configuration its GetConfigForClient picks per handshake (cached per
// configuration it returns, so that session tickets keep working).
func withALPN(base *tls.Config) *tls.Config {
	protos := []string{"h2", "http/1.1"}
	c := base.Clone()
	c.NextProtos = protos
	if get := base.GetConfigForClient; get != nil {
		var mu sync.Mutex
		var last, lastALPN *tls.Config
		c.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			pc, err := get(hi)
			if err != nil || pc == nil {
				return pc, err
			}
			mu.Lock()
			defer mu.Unlock()
			if pc != last {
				last, lastALPN = pc, pc.Clone()
				lastALPN.NextProtos = protos
			}
			return lastALPN, nil
		}
	}
	return c
}

// Addr is the address the listener listens on.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Shutdown stops the listener: the service's sessions end first (so that
// blocked acquires and watches answer UNAVAILABLE instead of holding the
// shutdown), then the HTTP server shuts down within ctx.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.svc.Close()
	err := l.srv.Shutdown(ctx)
	<-l.done
	return errors.Join(err, l.err)
}
