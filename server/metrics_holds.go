package server

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultLongHoldThreshold is Config.LongHoldThreshold's default.
const DefaultLongHoldThreshold = 10 * time.Minute

// longHoldScrapeTimeout bounds how long a scrape waits for the workers'
// counts of long holds; a busy worker that has not answered by then is
// left out of that scrape's figure.
const longHoldScrapeTimeout = time.Second

// longHoldThreshold returns the configured threshold of the long-hold
// gauge: the default when unset, 0 (disabled) when set to 0 or less.
func (c *Config) longHoldThreshold() time.Duration {
	if c.LongHoldThreshold == nil {
		return DefaultLongHoldThreshold
	}
	return max(time.Duration(*c.LongHoldThreshold), 0)
}

// longHoldsCollector reports paxlock_long_holds at scrape time: the holds
// the groups this node masters have served for longer than the threshold,
// counted by each worker from its deadline table when asked
// (group.Service.LongHolds), so no timer runs per hold. Disabled (no
// metric) when the threshold is 0.
type longHoldsCollector struct {
	s         *Server
	threshold time.Duration
	desc      *prometheus.Desc
}

func newLongHoldsCollector(s *Server) *longHoldsCollector {
	return &longHoldsCollector{
		s:         s,
		threshold: s.cfg.longHoldThreshold(),
		desc: prometheus.NewDesc("paxlock_long_holds",
			"Holds this node serves as master that have been held longer than long_hold_threshold (since their grant, or since this node became their group's master if later).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *longHoldsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *longHoldsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.threshold <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), longHoldScrapeTimeout)
	defer cancel()
	n, err := c.s.svc.LongHolds(ctx, c.threshold)
	if err != nil {
		c.s.log.Debug("long holds: a worker did not answer in time", "err", err)
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}
