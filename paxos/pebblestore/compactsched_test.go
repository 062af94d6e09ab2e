package pebblestore

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/paxlock/paxlock/internal/testutil"
)

// TestLazyCompactionScheduler: with one compaction allowed at a time and
// flushes piling up level-0 files faster than one compaction drains them,
// Pebble is refused and waits; the scheduler's granter must start the
// waiting compactions (level 0 drains once the writes stop), and then end,
// so that an idle store runs no ticker.
func TestLazyCompactionScheduler(t *testing.T) {
	sched := newLazyCompactionScheduler()
	opts := &pebble.Options{
		FS:                          vfs.NewMem(),
		FormatMajorVersion:          storeFormat,
		MemTableSize:                64 << 10,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       2,
		L0StopWritesThreshold:       1000,
		CompactionConcurrencyRange:  func() (int, int) { return 1, 1 },
		Logger:                      quietPebbleLogger{},
	}
	opts.Experimental.CompactionScheduler = sched
	db, err := pebble.Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}()
	val := make([]byte, 1024)
	for i := range 4000 {
		if err := db.Set(fmt.Appendf(nil, "k%07d", (i*7919)%4000), val, pebble.NoSync); err != nil {
			t.Fatal(err)
		}
		if i%200 == 199 {
			if err := db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		m := db.Metrics()
		return m.Compact.Count > 0 && m.Levels[0].TablesCount < 2
	}, "level 0 compacted")
	sched.mu.Lock()
	refused := sched.refused
	sched.mu.Unlock()
	t.Logf("refusals: %d", refused)
	if refused == 0 {
		t.Log("no TrySchedule was refused: the granter was not exercised this run")
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		sched.mu.Lock()
		defer sched.mu.Unlock()
		return !sched.granter && sched.running == 0
	}, "the granter to end")
}

type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any)  {}
func (quietPebbleLogger) Errorf(string, ...any) {}
func (quietPebbleLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
