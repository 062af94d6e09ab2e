package server

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// Metrics: the node's own Prometheus registry (not the global one, so that
// nodes in one process, as in tests, do not collide), served at /metrics.
//
// What moves with every request is updated on the hot path without
// allocating and without locks: histogram children are resolved once (the
// request histogram's lazily, per operation and status, then cached in an
// array of atomic pointers) and observed with atomics. Everything the node
// already counts or can read (connections, the groups' progress and lock
// counts, waiters, the transport, snapshots) is read at scrape time by
// nodeCollector instead.

// opNames are the request histogram's operation labels, by group.Op.
var opNames = [...]string{
	group.OpAcquire:      "acquire",
	group.OpRenew:        "renew",
	group.OpRelease:      "release",
	group.OpState:        "state",
	group.OpWatch:        "watch",
	group.OpUnwatch:      "unwatch",
	group.OpCancelWait:   "cancel_wait",
	group.OpForceRelease: "force_release",
	group.OpMultiAcquire: "multi_acquire",
}

// statNames are the counters group.Observer.Count feeds, by group.Stat.
var statNames = [group.NumStats]struct{ name, help string }{
	group.StatGrant:          {"paxlock_lock_grants_total", "Locks granted by this node as master (acquires and waiters handed the key)."},
	group.StatRelease:        {"paxlock_lock_releases_total", "Holds released by their holders on this node as master."},
	group.StatExpiry:         {"paxlock_lock_expiries_total", "Holds that expired (TTL passed unrenewed) on this node as master."},
	group.StatRenewal:        {"paxlock_lock_renewals_total", "Holds renewed on this node as master."},
	group.StatElectionWon:    {"paxlock_master_elections_won_total", "Times this node became a group's master by election."},
	group.StatMasterTransfer: {"paxlock_master_handoffs_total", "Times this node took a group over as its preferred master (a hand-off)."},
	group.StatMasterChange:   {"paxlock_master_changes_total", "Changes of a group's master as this node sees them (to another node or to none)."},
	group.StatLeaseLoss:      {"paxlock_master_lease_losses_total", "Times this node stopped serving a group it mastered other than by handing it off (lease not renewed, or superseded)."},
	group.StatHoldLimit:      {"paxlock_hold_limit_revocations_total", "Holds this node as master ended at their maximum hold time (Acquire.MaxHoldMs), renewed or not."},
}

// observerSlot caches one resolved child of the request histogram.
type observerSlot struct{ prometheus.Observer }

// metrics is a node's registry and the instruments the hot paths update.
// It implements group.Observer and host.Observer.
type metrics struct {
	reg *prometheus.Registry

	requests      *prometheus.HistogramVec
	reqChildren   [len(opNames)][16]atomic.Pointer[observerSlot]
	propose       prometheus.Histogram
	proposeFailed prometheus.Counter
	queueWait     prometheus.Histogram
	holdTime      prometheus.Histogram
	events        [group.NumStats]prometheus.Counter
	commitApply   prometheus.Histogram
	fsync         prometheus.Histogram
	roundInst     prometheus.Histogram
	instCmds      prometheus.Histogram
	authFailures  prometheus.Counter
}

// newMetrics builds the registry: the node's instruments, nodeCollector
// and storageCollector for s, and the Go runtime and process collectors.
func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "paxlock_request_duration_seconds",
		Help:    "Time from a lock request's arrival to its answer, on the node that served it (the group's master), by operation and status. A blocking acquire is answered LOCK_WAIT when it joins the queue; see paxlock_lock_queue_wait_seconds.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs … 3.3s
	}, []string{"op", "status"})
	m.propose = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_paxos_propose_commit_seconds",
		Help:    "Time from a command's submission on this node (a group's master) to its instance being chosen and applied here, or to its failure (counted in paxlock_paxos_proposals_failed_total too).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
	})
	m.proposeFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paxlock_paxos_proposals_failed_total",
		Help: "Lock changes proposed by this master that were not chosen (overload, lost lease or mastership, stopped).",
	})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_lock_queue_wait_seconds",
		Help:    "Time a blocked acquire waited in its key's queue before it was granted.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 11), // 1ms … 17min
	})
	m.holdTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_lock_hold_seconds",
		Help:    "How long holds released by their holders had been held (since the grant, or since this node became the group's master if later).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 12), // 1ms … 70min
	})
	m.commitApply = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_paxos_commit_apply_seconds",
		Help:    "Time from the start of the host round that learned instances were chosen to their apply to the state machines.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10), // 10µs … 2.6s
	})
	m.fsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_storage_fsync_duration_seconds",
		Help:    "Time from writing a round's Pebble batch to its fsync completing (the durable commit every vote and promise waits for).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14), // 1ms … 8s, etcd's wal_fsync_duration_seconds buckets
	})
	m.roundInst = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_paxos_round_instances",
		Help:    "Chosen instances applied per round of the host loop (all groups), for the rounds that applied any.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 8), // 1 … 128
	})
	m.instCmds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "paxlock_paxos_instance_commands",
		Help:    "Commands batched in one chosen instance.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12), // 1 … 2048
	})
	m.authFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "paxlock_auth_failures_total",
		Help: "Client Hellos refused for an unknown namespace or a wrong secret.",
	})
	m.reg.MustRegister(m.requests, m.propose, m.proposeFailed, m.queueWait, m.holdTime, m.commitApply, m.fsync, m.roundInst, m.instCmds, m.authFailures)
	for i, st := range statNames {
		m.events[i] = prometheus.NewCounter(prometheus.CounterOpts{Name: st.name, Help: st.help})
		m.reg.MustRegister(m.events[i])
	}
	m.reg.MustRegister(
		newNodeCollector(s),
		newStorageCollector(s),
		newCertCollector(s),
		newQuotaCollector(s),
		newConnLimitsCollector(s),
		newPeerRefusalsCollector(s),
		newLongHoldsCollector(s),
		buildInfoGauge(),
		auditGauge(s),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// handler serves the registry in the Prometheus exposition formats.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// requestObserver returns the request histogram's child for op and st,
// resolving it on first use.
func (m *metrics) requestObserver(op group.Op, st wire.Status) prometheus.Observer {
	if int(op) >= len(m.reqChildren) || int(st) >= len(m.reqChildren[0]) {
		return m.requests.WithLabelValues(opName(op), st.String()) // not a known pair: no cache
	}
	slot := &m.reqChildren[op][st]
	if o := slot.Load(); o != nil {
		return o.Observer
	}
	o := &observerSlot{m.requests.WithLabelValues(opName(op), st.String())}
	slot.Store(o) // a racing store resolves the same child
	return o.Observer
}

func opName(op group.Op) string {
	if int(op) < len(opNames) && opNames[op] != "" {
		return opNames[op]
	}
	return "op" + strconv.Itoa(int(op))
}

// Responded implements group.Observer.
func (m *metrics) Responded(op group.Op, st wire.Status, d time.Duration) {
	m.requestObserver(op, st).Observe(d.Seconds())
}

// Proposed implements host.Observer.
func (m *metrics) Proposed(d time.Duration, ok bool) {
	m.propose.Observe(d.Seconds())
	if !ok {
		m.proposeFailed.Inc()
	}
}

// Waited implements group.Observer.
func (m *metrics) Waited(d time.Duration) { m.queueWait.Observe(d.Seconds()) }

// Released implements group.Observer.
func (m *metrics) Released(d time.Duration) { m.holdTime.Observe(d.Seconds()) }

// Count implements group.Observer.
func (m *metrics) Count(ev group.Stat) {
	if ev < group.NumStats {
		m.events[ev].Inc()
	}
}

// InstanceApplied implements host.Observer.
func (m *metrics) InstanceApplied(commands int) { m.instCmds.Observe(float64(commands)) }

// RoundApplied implements host.Observer.
func (m *metrics) RoundApplied(instances int, d time.Duration) {
	m.roundInst.Observe(float64(instances))
	m.commitApply.Observe(d.Seconds())
}

// Synced implements host.Observer.
func (m *metrics) Synced(d time.Duration) { m.fsync.Observe(d.Seconds()) }

// nodeCollector reads, at scrape time, what the node counts anyway.
type nodeCollector struct {
	s *Server

	conns, requests, redirects, forwarded, relays, overloaded, badFrames, slow *prometheus.Desc
	storageFailed, sparesTaken, sparesMissed                                   *prometheus.Desc
	peerSent, peerWrites, peerDropped, peerReceived, peerRefused               *prometheus.Desc
	peerUp, peerUps, peerDowns, peerRTT                                        *prometheus.Desc
	gServing, gHasMaster, gMaster, gEpoch, gCommitted, gApplied, gApplyLag     *prometheus.Desc
	gLocks, gWaiters, gWatches                                                 *prometheus.Desc
	nsLocks                                                                    *prometheus.Desc
	snapSent, snapSentBytes, snapInstalled, snapRecvBytes                      *prometheus.Desc
}

func newNodeCollector(s *Server) *nodeCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &nodeCollector{
		s:             s,
		conns:         d("paxlock_client_connections", "Client connections open."),
		requests:      d("paxlock_requests_total", "Client request frames received."),
		redirects:     d("paxlock_redirects_total", "Requests answered MASTER_REDIRECT."),
		forwarded:     d("paxlock_forwarded_total", "Requests forwarded to their group's master."),
		relays:        d("paxlock_relays_opened_total", "Relay connections opened to other nodes for forwarding."),
		overloaded:    d("paxlock_overloaded_total", "Connections and requests refused OVERLOADED by the client listener (max_conns, max_inflight, relay queue). The lock service's own OVERLOADED answers are in paxlock_request_duration_seconds{status=\"OVERLOADED\"}."),
		badFrames:     d("paxlock_bad_frames_total", "Client connections closed for a frame that could not be decoded."),
		slow:          d("paxlock_slow_consumers_total", "Client connections closed as slow consumers (more than max_output unread)."),
		storageFailed: d("paxlock_storage_failed", "1 when a write or fsync of the node's store failed and the node stopped its groups (fail-stop)."),
		sparesTaken:   d("paxlock_storage_wal_spares_taken_total", "WAL files that were a zero-filled spare, so that their fsyncs wrote over allocated blocks (absent with disable_wal_spares)."),
		sparesMissed:  d("paxlock_storage_wal_spares_missed_total", "WAL files that needed a spare and found none ready, and were appended to (absent with disable_wal_spares)."),
		peerSent:      d("paxlock_peer_messages_sent_total", "Paxos messages written to peers' sockets."),
		peerWrites:    d("paxlock_peer_writes_total", "Write calls on peers' sockets (each carries every message queued for the peer at the time)."),
		peerDropped:   d("paxlock_peer_messages_dropped_total", "Paxos messages never written (queue full, peer unreachable, write failed, too large)."),
		peerReceived:  d("paxlock_peer_messages_received_total", "Paxos messages received from peers."),
		peerRefused:   d("paxlock_peer_refused_total", "Inbound peer connections closed at the handshake (TLS, identity or framing)."),
		peerUp:        d("paxlock_peer_up", "1 while this node's outbound connection to the peer is established.", "peer"),
		peerUps:       d("paxlock_peer_connects_total", "Outbound connections to the peer established.", "peer"),
		peerDowns:     d("paxlock_peer_disconnects_total", "Outbound connections to the peer lost.", "peer"),
		peerRTT:       d("paxlock_peer_rtt_seconds", "Smoothed round-trip time of the connection to the peer, as the kernel measures it (TCP_INFO; absent when down or unknown).", "peer"),
		gServing:      d("paxlock_group_serving", "1 on the node that masters the group and holds its lease.", "group"),
		gHasMaster:    d("paxlock_group_has_master", "1 when this node knows a master for the group.", "group"),
		gMaster:       d("paxlock_group_master", "The node id of the group's master as this node knows it (0: none).", "group"),
		gEpoch:        d("paxlock_group_epoch", "The ballot round of the group's master as this node knows it.", "group"),
		gCommitted:    d("paxlock_group_committed_instance", "The group's highest instance this node knows chosen.", "group"),
		gApplied:      d("paxlock_group_applied_instance", "The group's last instance this node applied.", "group"),
		gApplyLag:     d("paxlock_group_apply_lag_instances", "Instances this node knows chosen but has not applied yet.", "group"),
		gLocks:        d("paxlock_group_locks_held", "Keys held in the group's lock table on this node.", "group"),
		gWaiters:      d("paxlock_group_waiters", "Blocked acquires queued in the group on this node (its master).", "group"),
		gWatches:      d("paxlock_group_watches", "Watches set in the group on this node (its master).", "group"),
		nsLocks:       d("paxlock_locks_held", "Keys held in the namespace over all groups, in this node's replicas' lock tables (every namespace of the table, 0 when none is held).", "namespace"),
		snapSent:      d("paxlock_snapshots_sent_total", "Snapshot streams to lagging replicas completed.", "group"),
		snapSentBytes: d("paxlock_snapshot_sent_bytes_total", "Snapshot bytes acknowledged by receiving replicas.", "group"),
		snapInstalled: d("paxlock_snapshots_installed_total", "Snapshots received and installed.", "group"),
		snapRecvBytes: d("paxlock_snapshot_received_bytes_total", "Snapshot bytes received into installs.", "group"),
	}
}

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.conns, c.requests, c.redirects, c.forwarded, c.relays, c.overloaded, c.badFrames, c.slow,
		c.storageFailed, c.sparesTaken, c.sparesMissed, c.peerSent, c.peerWrites, c.peerDropped, c.peerReceived, c.peerRefused,
		c.peerUp, c.peerUps, c.peerDowns, c.peerRTT,
		c.gServing, c.gHasMaster, c.gMaster, c.gEpoch, c.gCommitted, c.gApplied, c.gApplyLag,
		c.gLocks, c.gWaiters, c.gWatches, c.nsLocks, c.snapSent, c.snapSentBytes, c.snapInstalled, c.snapRecvBytes,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauge(c.conns, float64(s.nconns.Load()))
	counter(c.requests, s.stats.requests.Load())
	counter(c.redirects, s.stats.redirects.Load())
	counter(c.forwarded, s.stats.forwarded.Load())
	counter(c.relays, s.stats.relays.Load())
	counter(c.overloaded, s.stats.overloaded.Load())
	counter(c.badFrames, s.stats.badFrames.Load())
	counter(c.slow, s.stats.slowConsumers.Load())
	gauge(c.storageFailed, b(s.store.Err() != nil))
	if sp := s.store.WALSpares(); sp.Enabled {
		counter(c.sparesTaken, sp.Taken)
		counter(c.sparesMissed, sp.Missed)
	}
	if s.tr != nil {
		ts := s.tr.Stats()
		counter(c.peerSent, ts.Sent)
		counter(c.peerWrites, ts.Writes)
		counter(c.peerDropped, ts.Dropped)
		counter(c.peerReceived, ts.Received)
		counter(c.peerRefused, ts.Refused)
		for _, p := range s.tr.Peers() {
			id := strconv.FormatUint(uint64(p.ID), 10)
			gauge(c.peerUp, b(p.Up), id)
			counter(c.peerUps, p.Ups, id)
			counter(c.peerDowns, p.Downs, id)
			if p.RTT > 0 {
				gauge(c.peerRTT, p.RTT.Seconds(), id)
			}
		}
	}
	c.collectNamespaces(gauge)
	v := s.view.Load()
	for g, lg := range s.svc.Groups() {
		id := strconv.Itoa(g)
		var gv wire.GroupView
		if g < len(v.Groups) {
			gv = v.Groups[g]
		}
		committed, applied, _ := lg.Consensus().Progress()
		gauge(c.gServing, b(lg.Serving()), id)
		gauge(c.gHasMaster, b(gv.Master != 0), id)
		gauge(c.gMaster, float64(gv.Master), id)
		gauge(c.gEpoch, float64(gv.Epoch), id)
		gauge(c.gCommitted, float64(committed), id)
		gauge(c.gApplied, float64(applied), id)
		lag := uint64(0)
		if committed > applied {
			lag = committed - applied
		}
		gauge(c.gApplyLag, float64(lag), id)
		gauge(c.gLocks, float64(lg.StateMachine().Count()), id)
		waiters, watches := lg.Waiting()
		gauge(c.gWaiters, float64(waiters), id)
		gauge(c.gWatches, float64(watches), id)
		if rep := s.replica(group.ID(g)); rep != nil {
			st := rep.Snapshots()
			counter(c.snapSent, st.Sent, id)
			counter(c.snapSentBytes, st.SentBytes, id)
			counter(c.snapInstalled, st.Installed, id)
			counter(c.snapRecvBytes, st.RecvBytes, id)
		}
	}
}

// collectNamespaces reports paxlock_locks_held: the held keys of every
// namespace of the table (0 when none), and of any namespace removed while
// its keys are still held. Namespaces are created by operators, so the
// label's values stay few.
func (c *nodeCollector) collectNamespaces(gauge func(d *prometheus.Desc, v float64, labels ...string)) {
	held := map[string]int64{}
	for _, ns := range c.s.svc.Namespaces() {
		held[ns] = 0
	}
	for _, lg := range c.s.svc.Groups() {
		for ns, n := range lg.StateMachine().HeldByNamespace() {
			held[ns] += n
		}
	}
	for ns, n := range held {
		gauge(c.nsLocks, float64(n), ns)
	}
}
