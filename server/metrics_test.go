package server

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/registry"
)

// scrape reads and parses a node's /metrics.
func scrape(t *testing.T, admin string) map[string]*dto.MetricFamily {
	t.Helper()
	body := adminGetOK(t, admin, "/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body) + "\n"))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sumOf adds up the samples of family name whose labels include want
// (counters and gauges by value, histograms by sample count); 0 when the
// family is absent.
func sumOf(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
	total := 0.0
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

// TestMetricsScrape scrapes an in-process node's /metrics: the families
// are there with HELP and TYPE, and taking, contending for and releasing
// a lock move the grant, release and queue-wait instruments and the
// request latency histogram.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	admin := tc.cfgs[0].AdminAddr
	fams := scrape(t, admin)
	for _, name := range []string{
		"paxlock_lock_grants_total", "paxlock_lock_releases_total", "paxlock_lock_expiries_total", "paxlock_lock_renewals_total",
		"paxlock_master_elections_won_total", "paxlock_master_changes_total", "paxlock_master_lease_losses_total", "paxlock_master_handoffs_total",
		"paxlock_auth_failures_total", "paxlock_overloaded_total", "paxlock_accept_errors_total", "paxlock_slow_consumers_total",
		"paxlock_paxos_propose_commit_seconds", "paxlock_paxos_commit_apply_seconds", "paxlock_storage_fsync_duration_seconds",
		"paxlock_paxos_round_instances", "paxlock_paxos_instance_commands", "paxlock_lock_queue_wait_seconds", "paxlock_lock_hold_seconds",
		"paxlock_group_serving", "paxlock_group_has_master", "paxlock_group_locks_held", "paxlock_locks_held", "paxlock_group_waiters", "paxlock_group_watches",
		"paxlock_group_applied_instance", "paxlock_group_apply_lag_instances", "paxlock_snapshots_sent_total",
		"paxlock_client_connections", "paxlock_storage_failed",
		"paxlock_storage_wal_spares_taken_total", "paxlock_storage_wal_spares_missed_total",
		"paxlock_accept_errors_total", "paxlock_tls_handshakes_refused_total", "paxlock_auth_timeouts_total",
		"paxlock_output_queued_bytes", "paxlock_output_budget_closes_total",
		"paxlock_hold_limit_revocations_total", "paxlock_long_holds",
		"go_goroutines", "process_cpu_seconds_total",
	} {
		f := fams[name]
		if f == nil {
			t.Errorf("/metrics lacks %s", name)
			continue
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		if f.Type == nil {
			t.Errorf("%s has no TYPE", name)
		}
	}
	if got := sumOf(fams, "paxlock_group_has_master", nil); got != float64(len(tc.nodes[0].svc.Groups())) {
		t.Errorf("paxlock_group_has_master sums to %v, want one per group", got)
	}
	if got := sumOf(fams, "paxlock_master_elections_won_total", nil); got < 1 {
		t.Errorf("paxlock_master_elections_won_total = %v on the only node, want ≥ 1", got)
	}
	// The WAL Pebble creates at open takes the spare prepared before it.
	if got := sumOf(fams, "paxlock_storage_wal_spares_taken_total", nil); got < 1 {
		t.Errorf("paxlock_storage_wal_spares_taken_total = %v, want ≥ 1 (the first WAL's)", got)
	}
	grants0 := sumOf(fams, "paxlock_lock_grants_total", nil)

	c := newClient(t, tc)
	ctx := ctxT(t)
	a, b := c.Mutex("metrics-key", client.TTL(30*time.Second)), c.Mutex("metrics-key", client.TTL(30*time.Second))
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of a held key: %v, want ErrLocked", err)
	}
	// Held locks per namespace: every namespace of the table has a
	// series, and the held key counts in its own.
	fams = scrape(t, admin)
	for ns, want := range map[string]float64{"ns": 1, "other": 0} {
		if !hasSeries(fams, "paxlock_locks_held", map[string]string{"namespace": ns}) {
			t.Errorf("paxlock_locks_held has no series for namespace %q", ns)
		}
		if got := sumOf(fams, "paxlock_locks_held", map[string]string{"namespace": ns}); got != want {
			t.Errorf("paxlock_locks_held{namespace=%q} = %v with one key held in ns, want %v", ns, got, want)
		}
	}
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx) }()
	testutil.Eventually(t, 30*time.Second, func() bool {
		return sumOf(scrape(t, admin), "paxlock_group_waiters", nil) == 1
	}, "the blocked acquire is not counted in paxlock_group_waiters")
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Observations follow the answers: wait for them.
	testutil.Eventually(t, 30*time.Second, func() bool {
		fams = scrape(t, admin)
		return sumOf(fams, "paxlock_lock_grants_total", nil) >= grants0+2 &&
			sumOf(fams, "paxlock_lock_releases_total", nil) >= 2 &&
			sumOf(fams, "paxlock_request_duration_seconds", map[string]string{"op": "release", "status": "SUCCESS"}) >= 2
	}, "grants and releases not counted")
	for _, c := range []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"paxlock_request_duration_seconds", map[string]string{"op": "acquire", "status": "SUCCESS"}, 1},
		{"paxlock_request_duration_seconds", map[string]string{"op": "acquire", "status": "LOCK_OCCUPIED"}, 1},
		{"paxlock_request_duration_seconds", map[string]string{"op": "acquire", "status": "LOCK_WAIT"}, 1},
		{"paxlock_lock_queue_wait_seconds", nil, 1},
		{"paxlock_lock_hold_seconds", nil, 2},
		{"paxlock_paxos_propose_commit_seconds", nil, 3},
		{"paxlock_storage_fsync_duration_seconds", nil, 1},
		{"paxlock_paxos_instance_commands", nil, 3},
		{"paxlock_requests_total", nil, 5},
	} {
		if got := sumOf(fams, c.name, c.labels); got < c.min {
			t.Errorf("%s%v = %v, want ≥ %v", c.name, c.labels, got, c.min)
		}
	}
	if got := sumOf(fams, "paxlock_group_locks_held", nil); got != 0 {
		t.Errorf("paxlock_group_locks_held sums to %v after both released, want 0", got)
	}
	if got := sumOf(fams, "paxlock_group_waiters", nil); got != 0 {
		t.Errorf("paxlock_group_waiters sums to %v after the grant, want 0", got)
	}
	if got := sumOf(fams, "paxlock_locks_held", nil); got != 0 {
		t.Errorf("paxlock_locks_held sums to %v after both released, want 0", got)
	}

	// A wrong secret is counted.
	if _, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "wrong", Logger: testLogger()}); err == nil {
		t.Fatal("a client with a wrong secret connected")
	}
	if got := sumOf(scrape(t, admin), "paxlock_auth_failures_total", nil); got < 1 {
		t.Errorf("paxlock_auth_failures_total = %v after a wrong secret, want ≥ 1", got)
	}
}

// TestOpNames: every operation has a label of its own.
func TestOpNames(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for op := group.OpAcquire; op <= group.OpForceRelease; op++ {
		n := opName(op)
		if n == "" || seen[n] || strings.HasPrefix(n, "op") {
			t.Errorf("op %d: label %q (empty, repeated or a fallback)", op, n)
		}
		seen[n] = true
	}
}

// registeredNames returns the names of every metric family the node's
// registry describes (histograms also under their _bucket, _sum and
// _count series).
func registeredNames(t *testing.T) map[string]bool {
	t.Helper()
	m := newMetrics(&Server{})
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		m.reg.Describe(ch)
		close(ch)
	}()
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for d := range ch {
		if s := re.FindStringSubmatch(d.String()); s != nil {
			names[s[1]] = true
		}
	}
	if len(names) < 30 {
		t.Fatalf("the registry describes %d metrics: %v", len(names), names)
	}
	return names
}

// TestDashboardAndAlertsUseRegisteredMetrics: every metric that
// docs/grafana/paxlock.json and docs/alerts.yml name, and every paxlock_
// metric the operations guide and the README name, is one the registry
// has, so that none of them drifts from the code.
func TestDashboardAndAlertsUseRegisteredMetrics(t *testing.T) {
	t.Parallel()
	names := registeredNames(t)
	for _, n := range registry.MetricNames() { // a registry process's, which operations.md names too
		names[n] = true
	}
	all := regexp.MustCompile(`\b(paxlock|go|process)_[a-z0-9_]+`)
	ours := regexp.MustCompile(`\bpaxlock_[a-z0-9_]+`)
	for _, doc := range []struct {
		path string
		re   *regexp.Regexp
		min  int
	}{
		{"../docs/grafana/paxlock.json", all, 20},
		{"../docs/alerts.yml", all, 8},
		{"../docs/operations.md", ours, 5},
		{"../README.md", ours, 5},
	} {
		b, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		used := doc.re.FindAllString(string(b), -1)
		if len(used) < doc.min {
			t.Errorf("%s names only %d metrics", doc.path, len(used))
		}
		for _, n := range used {
			base := n
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(n, suf); ok && names[s] {
					base = s
				}
			}
			if !names[base] {
				t.Errorf("%s uses %s, which the registry does not have", doc.path, n)
			}
		}
	}
}

// observeRequest is what the hot paths do for one acquire+release pair:
// two answered requests, two proposals with their instances and round,
// a grant, a release with its hold time, and an fsync.
func observeRequest(m *metrics) {
	m.Responded(group.OpAcquire, wire.StatusSuccess, 300*time.Microsecond)
	m.Responded(group.OpRelease, wire.StatusSuccess, 250*time.Microsecond)
	m.Proposed(200*time.Microsecond, true)
	m.Proposed(180*time.Microsecond, true)
	m.InstanceApplied(2)
	m.RoundApplied(1, 50*time.Microsecond)
	m.Count(group.StatGrant)
	m.Count(group.StatRelease)
	m.Released(time.Millisecond)
	m.Synced(2 * time.Millisecond)
}

// TestMetricsHotPathAllocs: once the request histogram's children are
// resolved, the observations a request causes allocate nothing.
func TestMetricsHotPathAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun measures the whole process.
	m := newMetrics(&Server{})
	observeRequest(m) // resolves the children
	if n := testing.AllocsPerRun(1000, func() { observeRequest(m) }); n != 0 {
		t.Errorf("a pair's observations allocate %v times, want 0", n)
	}
}

// BenchmarkMetricsPair measures the observations of one acquire+release
// pair (see observeRequest), from 2 goroutines at once.
func BenchmarkMetricsPair(b *testing.B) {
	m := newMetrics(&Server{})
	observeRequest(m)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			observeRequest(m)
		}
	})
}

// hasSeries reports whether family name has a series with labels.
func hasSeries(fams map[string]*dto.MetricFamily, name string, labels map[string]string) bool {
	f := fams[name]
	if f == nil {
		return false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, lp := range m.Label {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		return true
	}
	return false
}
