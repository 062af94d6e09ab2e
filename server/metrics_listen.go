package server

import "github.com/prometheus/client_golang/prometheus"

// listenCollector reports, at scrape time, the client listeners' failed
// accepts (a descriptor storm shows here while /readyz fails) and the TLS
// handshakes closed at once because max_tls_handshakes were under way.
type listenCollector struct {
	s                    *Server
	acceptErrors, tlsRef *prometheus.Desc
}

func newListenCollector(s *Server) *listenCollector {
	return &listenCollector{
		s: s,
		acceptErrors: prometheus.NewDesc("paxlock_accept_errors_total",
			"Failed accepts on a client listener (EMFILE, ENFILE, ECONNABORTED...), each retried after a backoff.", []string{"listener"}, nil),
		tlsRef: prometheus.NewDesc("paxlock_tls_handshakes_refused_total",
			"Client TLS connections closed before their handshake because max_tls_handshakes were under way.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *listenCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.acceptErrors
	ch <- c.tlsRef
}

// Collect implements prometheus.Collector.
func (c *listenCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.s.listeners.all() {
		ch <- prometheus.MustNewConstMetric(c.acceptErrors, prometheus.CounterValue, float64(h.errors.Load()), h.name)
	}
	if c.s.tlsSlots != nil {
		ch <- prometheus.MustNewConstMetric(c.tlsRef, prometheus.CounterValue, float64(c.s.tlsSlots.refused.Load()))
	}
}
