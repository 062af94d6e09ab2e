package server

import (
	"strconv"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// storageCollector reads, at scrape time, the node's Pebble engine
// (pebblestore.Store.Metrics) and the space its data directory takes on
// disk (Store.DirUsage): what the store's footprint is made of and what
// bounds it (see "The data directory's footprint" in docs/operations.md).
// Pebble's counters count since the store opened, so they restart from 0
// with the node, as Prometheus counters may.
type storageCollector struct {
	s *Server

	l0Files, l0Sublevels, levelFiles, levelBytes                 *prometheus.Desc
	debt, compRunning, compactions, compFailed, compSecs, compBy *prometheus.Desc
	memBytes, memCount, flushes, flushBytes                      *prometheus.Desc
	walFiles, walBytes, walWritten                               *prometheus.Desc
	tcFiles, tcBytes, tcHits, tcMisses, bcBytes, bcHits, bcMiss  *prometheus.Desc
	diskUsage, dirBytes                                          *prometheus.Desc
}

func newStorageCollector(s *Server) *storageCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &storageCollector{
		s:           s,
		l0Files:     d("paxlock_storage_l0_files", "Sstables in the store's level 0, where flushes land; Pebble stops writes at 24 sublevels (see paxlock_storage_l0_sublevels)."),
		l0Sublevels: d("paxlock_storage_l0_sublevels", "Sublevels of level 0 (its read amplification); compactions start at 4, writes stop at 24."),
		levelFiles:  d("paxlock_storage_level_files", "Sstables in the LSM level.", "level"),
		levelBytes:  d("paxlock_storage_level_bytes", "Bytes of the sstables in the LSM level.", "level"),
		debt:        d("paxlock_storage_compaction_debt_bytes", "Pebble's estimate of the bytes compactions must rewrite for the LSM to reach its stable shape."),
		compRunning: d("paxlock_storage_compactions_in_progress", "Compactions running (at most 2)."),
		compactions: d("paxlock_storage_compactions_total", "Compactions completed or failed since the store opened, by kind (default: a merge into the next level; move: a file moved down unrewritten; delete_only, elision_only, tombstone_density: dropping deleted data; read, rewrite, copy, blob_file_rewrite).", "kind"),
		compFailed:  d("paxlock_storage_compactions_failed_total", "Compactions that failed with an error since the store opened (counted in paxlock_storage_compactions_total too)."),
		compSecs:    d("paxlock_storage_compaction_duration_seconds_total", "Time spent in compactions since the store opened, summed over concurrent ones (running ones included)."),
		compBy:      d("paxlock_storage_compacted_bytes_total", "Bytes written to sstables by compactions since the store opened."),
		memBytes:    d("paxlock_storage_memtable_bytes", "Bytes allocated by the store's memtables (64 MiB each once grown), the mutable one and those waiting for a flush."),
		memCount:    d("paxlock_storage_memtables", "Memtables, the mutable one and those waiting for a flush; Pebble stops writes at 4."),
		flushes:     d("paxlock_storage_flushes_total", "Memtable flushes to level 0 since the store opened."),
		flushBytes:  d("paxlock_storage_flushed_bytes_total", "Bytes written to sstables by flushes since the store opened."),
		walFiles:    d("paxlock_storage_wal_files", "Live WAL files: the one written and those of memtables not flushed yet."),
		walBytes:    d("paxlock_storage_wal_bytes", "Bytes of data in the live WAL files (their allocated size on disk is paxlock_storage_disk_usage_bytes{kind=\"wal\"})."),
		walWritten:  d("paxlock_storage_wal_written_bytes_total", "Bytes written to the WAL since the store opened."),
		tcFiles:     d("paxlock_storage_table_cache_files", "Sstables and blob files held open by Pebble's table cache."),
		tcBytes:     d("paxlock_storage_table_cache_bytes", "Memory held by the table cache's open readers."),
		tcHits:      d("paxlock_storage_table_cache_hits_total", "Table cache lookups that found the file open."),
		tcMisses:    d("paxlock_storage_table_cache_misses_total", "Table cache lookups that opened the file."),
		bcBytes:     d("paxlock_storage_block_cache_bytes", "Bytes in Pebble's block cache (at most 64 MiB)."),
		bcHits:      d("paxlock_storage_block_cache_hits_total", "Block cache lookups that found the block."),
		bcMiss:      d("paxlock_storage_block_cache_misses_total", "Block cache lookups that read the block from disk."),
		diskUsage:   d("paxlock_storage_disk_usage_bytes", "Bytes of the store's files as Pebble accounts them, by kind (tables: live sstables; tables_obsolete: deleted by compactions, awaiting removal; tables_zombie: deleted but still read; blob_files; wal: live WALs; wal_obsolete: WALs kept for recycling; other: MANIFEST, OPTIONS and compaction output in progress). Their sum is Pebble's disk usage.", "kind"),
		dirBytes:    d("paxlock_storage_data_dir_bytes", "Bytes data_dir takes on disk (allocated blocks, as du counts them), by kind of file (tables, blob_files, wal, wal_spares, manifest, other: the node's own files). Their sum is the directory's size.", "kind"),
	}
}

// Describe implements prometheus.Collector.
func (c *storageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.l0Files, c.l0Sublevels, c.levelFiles, c.levelBytes,
		c.debt, c.compRunning, c.compactions, c.compFailed, c.compSecs, c.compBy,
		c.memBytes, c.memCount, c.flushes, c.flushBytes, c.walFiles, c.walBytes, c.walWritten,
		c.tcFiles, c.tcBytes, c.tcHits, c.tcMisses, c.bcBytes, c.bcHits, c.bcMiss,
		c.diskUsage, c.dirBytes,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A closed store reports
// nothing of Pebble; a directory that cannot be listed, no data_dir_bytes.
func (c *storageCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.store
	if st == nil {
		return
	}
	if m := st.Metrics(); m != nil {
		c.collectLSM(ch, m)
		c.collectWrites(ch, m)
		c.collectDisk(ch, m)
	}
	if u, err := st.DirUsage(); err == nil {
		for _, k := range []struct {
			kind string
			n    int64
		}{
			{"tables", u.Tables}, {"blob_files", u.BlobFiles}, {"wal", u.WAL},
			{"wal_spares", u.WALSpares}, {"manifest", u.Manifest}, {"other", u.Other},
		} {
			ch <- prometheus.MustNewConstMetric(c.dirBytes, prometheus.GaugeValue, float64(k.n), k.kind)
		}
	}
}

func gaugeOf(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counterOf(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// collectLSM reports the levels and the compactions.
func (c *storageCollector) collectLSM(ch chan<- prometheus.Metric, m *pebble.Metrics) {
	gaugeOf(ch, c.l0Files, float64(m.Levels[0].TablesCount))
	gaugeOf(ch, c.l0Sublevels, float64(m.Levels[0].Sublevels))
	var compacted uint64
	for i := range m.Levels {
		l := &m.Levels[i]
		level := strconv.Itoa(i)
		gaugeOf(ch, c.levelFiles, float64(l.TablesCount), level)
		gaugeOf(ch, c.levelBytes, float64(l.TablesSize), level)
		compacted += l.TableBytesCompacted + l.BlobBytesCompacted
	}
	cm := &m.Compact
	gaugeOf(ch, c.debt, float64(cm.EstimatedDebt))
	gaugeOf(ch, c.compRunning, float64(cm.NumInProgress))
	for _, k := range []struct {
		kind string
		n    int64
	}{
		{"default", cm.DefaultCount}, {"move", cm.MoveCount}, {"delete_only", cm.DeleteOnlyCount},
		{"elision_only", cm.ElisionOnlyCount}, {"tombstone_density", cm.TombstoneDensityCount},
		{"read", cm.ReadCount}, {"rewrite", cm.RewriteCount}, {"copy", cm.CopyCount},
		{"blob_file_rewrite", cm.BlobFileRewriteCount},
	} {
		counterOf(ch, c.compactions, float64(k.n), k.kind)
	}
	counterOf(ch, c.compFailed, float64(cm.FailedCount))
	counterOf(ch, c.compSecs, cm.Duration.Seconds())
	counterOf(ch, c.compBy, float64(compacted))
}

// collectWrites reports the memtables, flushes, WAL and caches.
func (c *storageCollector) collectWrites(ch chan<- prometheus.Metric, m *pebble.Metrics) {
	gaugeOf(ch, c.memBytes, float64(m.MemTable.Size))
	gaugeOf(ch, c.memCount, float64(m.MemTable.Count))
	counterOf(ch, c.flushes, float64(m.Flush.Count))
	counterOf(ch, c.flushBytes, float64(m.Levels[0].TableBytesFlushed+m.Levels[0].BlobBytesFlushed))
	gaugeOf(ch, c.walFiles, float64(m.WAL.Files))
	gaugeOf(ch, c.walBytes, float64(m.WAL.Size))
	counterOf(ch, c.walWritten, float64(m.WAL.BytesWritten))
	gaugeOf(ch, c.tcFiles, float64(m.FileCache.TableCount+m.FileCache.BlobFileCount))
	gaugeOf(ch, c.tcBytes, float64(m.FileCache.Size))
	counterOf(ch, c.tcHits, float64(m.FileCache.Hits))
	counterOf(ch, c.tcMisses, float64(m.FileCache.Misses))
	gaugeOf(ch, c.bcBytes, float64(m.BlockCache.Size))
	counterOf(ch, c.bcHits, float64(m.BlockCache.Hits))
	counterOf(ch, c.bcMiss, float64(m.BlockCache.Misses))
}

// collectDisk reports Pebble's disk usage by kind; "other" is what
// Pebble counts beyond the kinds it reports apart.
func (c *storageCollector) collectDisk(ch chan<- prometheus.Metric, m *pebble.Metrics) {
	t, b := &m.Table.Local, &m.BlobFiles.Local
	kinds := []struct {
		kind string
		n    uint64
	}{
		{"tables", t.LiveSize}, {"tables_obsolete", t.ObsoleteSize}, {"tables_zombie", t.ZombieSize},
		{"blob_files", b.LiveSize + b.ObsoleteSize + b.ZombieSize},
		{"wal", m.WAL.PhysicalSize}, {"wal_obsolete", m.WAL.ObsoletePhysicalSize},
	}
	total := m.DiskSpaceUsage()
	var known uint64
	for _, k := range kinds {
		gaugeOf(ch, c.diskUsage, float64(k.n), k.kind)
		known += k.n
	}
	other := uint64(0)
	if total > known {
		other = total - known
	}
	gaugeOf(ch, c.diskUsage, float64(other), "other")
}
