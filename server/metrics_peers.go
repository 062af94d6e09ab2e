package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/paxos"
)

// reasonMisaddressed labels the peer messages the transport refused for
// naming another receiver, or a sender other than the node the
// connection authenticated as (tcpnet.Stats.Rejected).
const reasonMisaddressed = "misaddressed"

// peerRefusalsCollector exports, at scrape time, the peer messages this
// node refused as no honest peer sends them: by the consensus core's
// reasons (paxos.RefuseReason, summed over the groups) and the
// transport's misaddressed ones.
type peerRefusalsCollector struct {
	s       *Server
	refused *prometheus.Desc
}

func newPeerRefusalsCollector(s *Server) *peerRefusalsCollector {
	return &peerRefusalsCollector{s: s, refused: prometheus.NewDesc("paxlock_peer_messages_refused_total",
		"Peer messages (or their entries) dropped unread as no honest node sends them, by reason: foreign_ballot (a proposer's ballot not its sender's), round_jump (a ballot beyond max_round_jump), instance_ahead (an entry beyond max_instance_ahead), unasked_answer (a Learn answer nobody asked for), unrequested_snapshot (a snapshot stream nobody asked for), misaddressed (another receiver, or a sender other than the connection's node). Any of them growing means a buggy or hostile peer.",
		[]string{"reason"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *peerRefusalsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.refused }

// Collect implements prometheus.Collector.
func (c *peerRefusalsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	var sum paxos.Refusals
	if s.host != nil && s.svc != nil {
		for g := range s.svc.Groups() {
			if rep := s.replica(group.ID(g)); rep != nil {
				r := rep.Refusals()
				for i, v := range r {
					sum[i] += v
				}
			}
		}
	}
	for i, v := range sum {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(v), paxos.RefuseReason(i).String())
	}
	var misaddressed uint64
	if s.tr != nil {
		misaddressed = s.tr.Stats().Rejected
	}
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(misaddressed), reasonMisaddressed)
}
