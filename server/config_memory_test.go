package server

import "testing"

// TestCgroupMemoryLimitParse: a number is a limit, v2's "max" and v1's
// page-rounded largest int64 are none, and so is anything unreadable.
func TestCgroupMemoryLimitParse(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"536870912\n":           536870912,
		"max\n":                 0,
		"9223372036854771712\n": 0,
		"":                      0,
		"-1":                    0,
	} {
		if got := parseCgroupLimit([]byte(in)); got != want {
			t.Errorf("parseCgroupLimit(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestMemoryLimitFromCgroup: the Go heap gets nine tenths of the cgroup
// less Pebble's memtables and cache, never under a quarter of it, and no
// limit without a cgroup limit.
func TestMemoryLimitFromCgroup(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	m := Memory{MemTableSize: 16 * mib, BlockCacheSize: 32 * mib}
	if got, want := m.fromCgroup(1000*mib), int64(1000*mib/10*9-(2*16+32)*mib); got != want {
		t.Errorf("1000 MiB cgroup: %d, want %d", got, want)
	}
	if got, want := m.fromCgroup(80*mib), int64(80*mib/4); got != want {
		t.Errorf("80 MiB cgroup: %d, want a quarter, %d", got, want)
	}
	if got := m.fromCgroup(0); got != 0 {
		t.Errorf("no cgroup limit: %d, want none", got)
	}
	if got := (Memory{}).memTable(); got != DefaultMemTableSize {
		t.Errorf("default memtable %d, want %d", got, DefaultMemTableSize)
	}
}
