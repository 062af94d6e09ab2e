package server

import (
	"bytes"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
)

// Memory sizes what a node keeps in memory beside its records: the Go
// heap's soft limit and Pebble's memtable and block cache (which Pebble
// allocates outside the Go heap).
type Memory struct {
	// MemoryLimit is the Go runtime's soft memory limit in bytes
	// (runtime/debug.SetMemoryLimit): the garbage collector runs harder
	// as the heap nears it instead of letting it grow to twice what is
	// live. 0 derives it from the cgroup's memory limit where there is
	// one (nine tenths of it, less Pebble's memtables and cache), and
	// sets none where there is not; negative sets none. The GOMEMLIMIT
	// environment variable, when set, wins.
	MemoryLimit int64 `json:"memory_limit"`
	// MemTableSize is the size of Pebble's memtable in bytes (up to two
	// are in memory at once, the mutable one and one flushing); 0 means
	// DefaultMemTableSize.
	MemTableSize int64 `json:"memtable_size"`
	// BlockCacheSize is the size of Pebble's block cache in bytes; 0
	// means the store's default (64 MiB).
	BlockCacheSize int64 `json:"block_cache_size"`
}

// DefaultMemTableSize is Memory.MemTableSize's default.
const DefaultMemTableSize = 64 << 20

// defaultBlockCache is the store's block cache when Memory.BlockCacheSize
// is 0 (see pebblestore.Options.CacheSize).
const defaultBlockCache = 64 << 20

// memTable returns the memtable size the store gets.
func (m Memory) memTable() uint64 {
	if m.MemTableSize > 0 {
		return uint64(m.MemTableSize)
	}
	return DefaultMemTableSize
}

// blockCache returns the block cache size the store gets (0: its default).
func (m Memory) blockCache() int64 { return max(m.BlockCacheSize, 0) }

// ApplyMemoryLimit sets the Go runtime's soft memory limit from m (see
// Memory.MemoryLimit), cgroup being the cgroup's memory limit in bytes (0
// for none; see CgroupMemoryLimit), and returns the limit set (0: none).
// It changes the whole process, so paxlockd calls it, not New.
func (m Memory) ApplyMemoryLimit(cgroup int64, log *slog.Logger) int64 {
	if os.Getenv("GOMEMLIMIT") != "" || m.MemoryLimit < 0 {
		return 0
	}
	limit := m.MemoryLimit
	if limit == 0 {
		limit = m.fromCgroup(cgroup)
	}
	if limit <= 0 {
		return 0
	}
	debug.SetMemoryLimit(limit)
	log.Info("memory limit", "go_bytes", limit, "cgroup_bytes", cgroup)
	return limit
}

// fromCgroup is the Go heap's share of a cgroup limit of cgroup bytes:
// nine tenths of it less Pebble's memory (two memtables and the cache),
// and never under a quarter of it; 0 when there is no limit.
func (m Memory) fromCgroup(cgroup int64) int64 {
	if cgroup <= 0 {
		return 0
	}
	cache := m.blockCache()
	if cache == 0 {
		cache = defaultBlockCache
	}
	pebble := 2*int64(m.memTable()) + cache
	return max(cgroup/10*9-pebble, cgroup/4)
}

// cgroupLimitFiles are where a process reads its cgroup's memory limit:
// v2's memory.max, then v1's memory.limit_in_bytes.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// CgroupMemoryLimit returns this process's cgroup memory limit in bytes,
// 0 where there is none (no cgroup file, "max", or v1's "unlimited"
// value near the largest int64).
func CgroupMemoryLimit() int64 {
	for _, f := range cgroupLimitFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		return parseCgroupLimit(b)
	}
	return 0
}

// parseCgroupLimit reads a cgroup memory limit file's content: 0 for
// none.
func parseCgroupLimit(b []byte) int64 {
	s := string(bytes.TrimSpace(b))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= math.MaxInt64/2 {
		return 0 // "max", garbage, or v1's page-rounded MaxInt64
	}
	return n
}
