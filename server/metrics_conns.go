package server

import "github.com/prometheus/client_golang/prometheus"

// connLimitsCollector exports, at scrape time, what the client
// listeners' bounds refused: failed accepts per listener, TLS handshakes
// refused at max_tls_handshakes, and connections closed unauthenticated
// at auth_timeout.
type connLimitsCollector struct {
	s                                   *Server
	acceptErrors, tlsRefused, authTimes *prometheus.Desc
	outQueued, budgetCloses             *prometheus.Desc
}

func newConnLimitsCollector(s *Server) *connLimitsCollector {
	return &connLimitsCollector{
		s:            s,
		acceptErrors: prometheus.NewDesc("paxlock_accept_errors_total", "Failed accepts on a client listener (each retried with backoff).", []string{"listener"}, nil),
		tlsRefused:   prometheus.NewDesc("paxlock_tls_handshakes_refused_total", "Client TLS connections closed before their handshake, max_tls_handshakes being under way.", nil, nil),
		authTimes:    prometheus.NewDesc("paxlock_auth_timeouts_total", "Client connections closed for not authenticating within auth_timeout.", nil, nil),
		outQueued:    prometheus.NewDesc("paxlock_output_queued_bytes", "Replies and pushes queued for all client connections, not yet read by their clients (bounded by max_output_total).", nil, nil),
		budgetCloses: prometheus.NewDesc("paxlock_output_budget_closes_total", "Client connections closed as slow consumers because the node's queued output passed max_output_total (also counted in paxlock_slow_consumers_total).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *connLimitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.acceptErrors
	ch <- c.tlsRefused
	ch <- c.authTimes
	ch <- c.outQueued
	ch <- c.budgetCloses
}

// Collect implements prometheus.Collector.
func (c *connLimitsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	for _, h := range s.listeners.all() {
		ch <- prometheus.MustNewConstMetric(c.acceptErrors, prometheus.CounterValue, float64(h.errors.Load()), h.name)
	}
	var refused uint64
	if s.tlsSlots != nil {
		refused = s.tlsSlots.refused.Load()
	}
	ch <- prometheus.MustNewConstMetric(c.tlsRefused, prometheus.CounterValue, float64(refused))
	ch <- prometheus.MustNewConstMetric(c.authTimes, prometheus.CounterValue, float64(s.stats.authTimeouts.Load()))
	ch <- prometheus.MustNewConstMetric(c.outQueued, prometheus.GaugeValue, float64(s.outBudget.queued.Load()))
	ch <- prometheus.MustNewConstMetric(c.budgetCloses, prometheus.CounterValue, float64(s.outBudget.closes.Load()))
}
