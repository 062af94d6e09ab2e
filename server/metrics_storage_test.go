package server

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/internal/testutil"
	"github.com/paxlock/paxlock/paxos"
	"github.com/paxlock/paxlock/paxos/pebblestore"
)

// storageFamilies are the families storageCollector reports on an open
// store, with their type.
var storageFamilies = map[string]dto.MetricType{
	"paxlock_storage_l0_files":                          dto.MetricType_GAUGE,
	"paxlock_storage_l0_sublevels":                      dto.MetricType_GAUGE,
	"paxlock_storage_level_files":                       dto.MetricType_GAUGE,
	"paxlock_storage_level_bytes":                       dto.MetricType_GAUGE,
	"paxlock_storage_compaction_debt_bytes":             dto.MetricType_GAUGE,
	"paxlock_storage_compactions_in_progress":           dto.MetricType_GAUGE,
	"paxlock_storage_compactions_total":                 dto.MetricType_COUNTER,
	"paxlock_storage_compactions_failed_total":          dto.MetricType_COUNTER,
	"paxlock_storage_compaction_duration_seconds_total": dto.MetricType_COUNTER,
	"paxlock_storage_compacted_bytes_total":             dto.MetricType_COUNTER,
	"paxlock_storage_memtable_bytes":                    dto.MetricType_GAUGE,
	"paxlock_storage_memtables":                         dto.MetricType_GAUGE,
	"paxlock_storage_flushes_total":                     dto.MetricType_COUNTER,
	"paxlock_storage_flushed_bytes_total":               dto.MetricType_COUNTER,
	"paxlock_storage_wal_files":                         dto.MetricType_GAUGE,
	"paxlock_storage_wal_bytes":                         dto.MetricType_GAUGE,
	"paxlock_storage_wal_written_bytes_total":           dto.MetricType_COUNTER,
	"paxlock_storage_table_cache_files":                 dto.MetricType_GAUGE,
	"paxlock_storage_table_cache_bytes":                 dto.MetricType_GAUGE,
	"paxlock_storage_table_cache_hits_total":            dto.MetricType_COUNTER,
	"paxlock_storage_table_cache_misses_total":          dto.MetricType_COUNTER,
	"paxlock_storage_block_cache_bytes":                 dto.MetricType_GAUGE,
	"paxlock_storage_block_cache_hits_total":            dto.MetricType_COUNTER,
	"paxlock_storage_block_cache_misses_total":          dto.MetricType_COUNTER,
	"paxlock_storage_disk_usage_bytes":                  dto.MetricType_GAUGE,
	"paxlock_storage_data_dir_bytes":                    dto.MetricType_GAUGE,
}

// gatherStorage gathers reg into families by name, checking that every
// storage family is there with its HELP and type.
func gatherStorage(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	got, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, f := range got {
		fams[f.GetName()] = f
	}
	for name, typ := range storageFamilies {
		f := fams[name]
		switch {
		case f == nil:
			t.Errorf("no %s", name)
		case f.GetHelp() == "":
			t.Errorf("%s has no HELP", name)
		case f.GetType() != typ:
			t.Errorf("%s is a %v, want a %v", name, f.GetType(), typ)
		}
	}
	return fams
}

// TestStorageCollectorMoves scrapes storageCollector over a store with
// small memtables: writes move the WAL's bytes, filling memtables makes
// flushes and level-0 files, the data directory's kinds are there and
// add up to something, and a closed store reports only its directory.
func TestStorageCollectorMoves(t *testing.T) {
	t.Parallel()
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{
		Logger: slog.New(slog.DiscardHandler), MemTableSize: 1 << 20, CacheSize: 4 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = st.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStorageCollector(&Server{store: st}))

	fams := gatherStorage(t, reg)
	if got := sumOf(fams, "paxlock_storage_flushes_total", nil); got != 0 {
		t.Errorf("paxlock_storage_flushes_total = %v on a fresh store", got)
	}
	for _, kind := range []string{"tables", "blob_files", "wal", "wal_spares", "manifest", "other"} {
		if !hasSeries(fams, "paxlock_storage_data_dir_bytes", map[string]string{"kind": kind}) {
			t.Errorf("paxlock_storage_data_dir_bytes has no kind %q", kind)
		}
	}
	// The spare prepared at open went to the WAL Pebble made on open, and
	// the next one is written in the background: it is there once ready.
	waitFor(t, "paxlock_storage_data_dir_bytes{kind=\"wal_spares\"} > 0 (a spare ready after open)", func() bool {
		return sumOf(gatherStorage(t, reg), "paxlock_storage_data_dir_bytes", map[string]string{"kind": "wal_spares"}) > 0
	})
	for _, level := range []string{"0", "6"} {
		if !hasSeries(fams, "paxlock_storage_level_files", map[string]string{"level": level}) {
			t.Errorf("paxlock_storage_level_files has no level %s", level)
		}
	}

	// 4 MiB of log entries through 1 MiB memtables.
	b := st.NewBatch()
	defer b.Close()
	val := []byte(strings.Repeat("v", 1024))
	for i := uint64(1); i <= 4096; i++ {
		e := paxos.Entry{Instance: i, Value: paxos.Value{Cmds: [][]byte{val}}}
		b.PutEntry(1, &e)
		if i%256 == 0 {
			if err := b.Commit(true); err != nil {
				t.Fatal(err)
			}
		}
	}
	fams = gatherStorage(t, reg)
	if got := sumOf(fams, "paxlock_storage_wal_written_bytes_total", nil); got < 4<<20 {
		t.Errorf("paxlock_storage_wal_written_bytes_total = %v after 4 MiB of writes", got)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		fams = gatherStorage(t, reg)
		return sumOf(fams, "paxlock_storage_flushes_total", nil) > 0
	}, "no flush counted after 4 MiB written through 1 MiB memtables")
	if got := sumOf(fams, "paxlock_storage_flushed_bytes_total", nil); got == 0 {
		t.Error("paxlock_storage_flushed_bytes_total = 0 after a flush")
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		fams = gatherStorage(t, reg)
		return sumOf(fams, "paxlock_storage_level_files", nil) > 0 &&
			sumOf(fams, "paxlock_storage_disk_usage_bytes", map[string]string{"kind": "tables"}) > 0 &&
			sumOf(fams, "paxlock_storage_data_dir_bytes", map[string]string{"kind": "tables"}) > 0
	}, "the flushed tables are not counted in the levels and on disk")

	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		if f.GetName() != "paxlock_storage_data_dir_bytes" {
			t.Errorf("a closed store reports %s", f.GetName())
		}
	}
}

// TestMetricsScrapeStorage: a node's /metrics carries the storage
// engine's families, and a lock taken moves its WAL bytes.
func TestMetricsScrapeStorage(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 1)
	admin := tc.cfgs[0].AdminAddr
	before := sumOf(scrape(t, admin), "paxlock_storage_wal_written_bytes_total", nil)
	c := newClient(t, tc)
	if err := c.Mutex("storage-metrics", client.TTL(30*time.Second)).Lock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, admin)
	for name := range storageFamilies {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if after := sumOf(fams, "paxlock_storage_wal_written_bytes_total", nil); after <= before {
		t.Errorf("paxlock_storage_wal_written_bytes_total went from %v to %v over a lock taken", before, after)
	}
	if got := sumOf(fams, "paxlock_storage_data_dir_bytes", nil); got == 0 {
		t.Error("paxlock_storage_data_dir_bytes sums to 0")
	}
}
