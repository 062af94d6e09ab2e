package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paxlock/paxlock/group"
)

// quotaCollector reports, at scrape time, every namespace quota this node
// enforces and what it counts against it (group.Service.QuotaUsage): the
// counts live in the quota table's atomics, so the request path resolves
// no label. Namespaces are created by operators, so the label's values
// stay few.
type quotaCollector struct {
	s                     *Server
	limit, nodeLimit, use *prometheus.Desc
	admitted, refused     *prometheus.Desc
}

func newQuotaCollector(s *Server) *quotaCollector {
	ns := []string{"namespace"}
	nsKind := []string{"namespace", "kind"}
	return &quotaCollector{
		s: s,
		limit: prometheus.NewDesc("paxlock_namespace_quota_limit",
			"A namespace's quota, cluster-wide, by kind (held: holders, waiters, rate in requests per second, burst); only the limits set.", nsKind, nil),
		nodeLimit: prometheus.NewDesc("paxlock_namespace_quota_node_limit",
			"This node's share of a namespace's waiters, rate and burst quotas (in proportion to the groups it masters).", nsKind, nil),
		use: prometheus.NewDesc("paxlock_namespace_quota_use",
			"What counts against a namespace's quota: holders (each writer, reader and semaphore permit holder) cluster-wide as this node has applied them (held), blocked acquires queued on this node's masters (waiters).", nsKind, nil),
		admitted: prometheus.NewDesc("paxlock_namespace_quota_admitted_total",
			"Requests of a namespace with a rate quota that this node checked and admitted.", ns, nil),
		refused: prometheus.NewDesc("paxlock_namespace_quota_refusals_total",
			"Requests this node answered OVERLOADED because of a namespace's quota, by kind (held, waiters, rate).", nsKind, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.limit, c.nodeLimit, c.use, c.admitted, c.refused} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for ns, u := range c.s.svc.QuotaUsage() {
		q := u.Quota
		for _, l := range []struct {
			kind string
			v    int64
			node int64
		}{{"held", q.Held, 0}, {"waiters", q.Waiters, u.NodeWaiters}, {"rate", q.Rate, u.NodeRate}, {"burst", q.Burst, u.NodeBurst}} {
			if l.v > 0 {
				gauge(c.limit, l.v, ns, l.kind)
			}
			if l.node > 0 {
				gauge(c.nodeLimit, l.node, ns, l.kind)
			}
		}
		gauge(c.use, u.Held, ns, "held")
		gauge(c.use, u.Waiters, ns, "waiters")
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(u.Admitted), ns)
		for k := range group.NumQuotaKinds {
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(u.Refused[k]), ns, k.String())
		}
	}
}
