// This file is the registry's HTTP status endpoint: GET /status and
// /metrics.

package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/net/netutil"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/paxlock/paxlock/internal/adminguard"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Report is a registry's status, as GET /status answers it.
type Report struct {
	// Meta is the meta subscription: while Connected is false the
	// registry serves the last tables it received.
	Meta       MetaStatus      `json:"meta"`
	Clusters   []ClusterStatus `json:"clusters"`
	Namespaces int             `json:"namespaces"`
	// Mover says this registry holds the mover lock and drives the
	// namespace moves; MoverToken is the lock's fencing token.
	Mover      bool   `json:"mover"`
	MoverToken uint64 `json:"mover_token,omitempty"`
}

// Report returns the registry's status.
func (s *Standalone) Report() Report {
	s.tmu.RLock()
	n := len(s.nsMap)
	s.tmu.RUnlock()
	tok := s.moves.token.Load()
	return Report{Meta: s.Meta(), Clusters: s.Status(), Namespaces: n, Mover: tok != 0, MoverToken: tok}
}

// AdminAddr returns the status endpoint's address (nil without
// AdminListen, or before Start).
func (s *Standalone) AdminAddr() net.Addr { return s.adminAddr }

// adminMaxConns bounds the status endpoint's connections at once.
const adminMaxConns = 64

// startAdmin opens the status endpoint, if configured: behind AdminToken
// when set (the report names the mover's fencing token), and behind
// adminguard's Host, Origin and Content-Type checks always.
func (s *Standalone) startAdmin(ctx context.Context) error {
	if s.cfg.AdminListen == "" {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.AdminListen)
	if err != nil {
		return fmt.Errorf("registry: admin listen: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.collectors()...)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Report())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	hosts := adminguard.Hosts{Static: append([]string{adminguard.HostOf(s.cfg.AdminListen), adminguard.HostOf(s.cfg.Listen)}, s.cfg.AdminAllowedHosts...)}
	handler := adminguard.RequireToken(s.cfg.AdminToken, nil, adminguard.Wrap(hosts, mux))
	// Bounded like a node's admin endpoint: idle or stalled readers
	// cannot hold the registry's descriptors.
	s.admin = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
	ln = netutil.LimitListener(ln, adminMaxConns)
	s.adminAddr = ln.Addr()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("registry: admin endpoint", "err", err)
		}
	}()
	return nil
}

// collectors are the registry's metrics, as /metrics serves them.
func (s *Standalone) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paxlock_registry_meta_connected",
			Help: "1 while the registry holds a subscription to the meta cluster's tables; 0 while it serves the last ones it received (or has static tables)."},
			func() float64 {
				if s.Meta().Connected {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paxlock_registry_mover",
			Help: "1 while this registry holds the mover lock and drives the namespace moves."},
			func() float64 {
				if s.moves.token.Load() != 0 {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paxlock_registry_tables_version", Help: "Version of the registry tables served."},
			func() float64 { return float64(s.tablesVersion()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "paxlock_registry_namespaces", Help: "Namespaces in the registry tables served."},
			func() float64 { return float64(s.Report().Namespaces) }),
	}
}

// MetricNames lists the names of the metrics a registry serves on
// /metrics (for checks that documentation names only metrics that exist).
func MetricNames() []string {
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		defer close(ch)
		for _, c := range (&Standalone{}).collectors() {
			c.Describe(ch)
		}
	}()
	var names []string
	for d := range ch {
		s := d.String()
		if _, rest, ok := strings.Cut(s, `fqName: "`); ok {
			if name, _, ok := strings.Cut(rest, `"`); ok {
				names = append(names, name)
			}
		}
	}
	return names
}
