package pebblestore

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactGrantEvery is how often a waiting compaction is reconsidered,
// as often as Pebble's own scheduler does.
const compactGrantEvery = 100 * time.Millisecond

// lazyCompactionScheduler is Pebble's default compaction scheduler
// (pebble.ConcurrencyLimitScheduler: at most GetAllowedWithoutPermission
// compactions at once) without its ticker on an idle store. The default
// samples the allowed count every 100ms for the life of the database,
// which wakes an idle node 10 times a second; this one runs its granter
// goroutine only while Pebble waits for a grant it refused, which is also
// the only time the sampling can start a compaction (a store that is not
// waiting asks with TrySchedule itself).
type lazyCompactionScheduler struct {
	db pebble.DBForCompaction

	mu      sync.Mutex
	running int    // compactions granted and not Done
	refused uint64 // TrySchedule refusals, so the granter sees one it raced with
	granter bool   // a granter goroutine runs
	closed  bool
	poke    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
}

var _ pebble.CompactionScheduler = (*lazyCompactionScheduler)(nil)

func newLazyCompactionScheduler() *lazyCompactionScheduler {
	return &lazyCompactionScheduler{poke: make(chan struct{}, 1), stop: make(chan struct{})}
}

// Register implements pebble.CompactionScheduler.
func (s *lazyCompactionScheduler) Register(_ int, db pebble.DBForCompaction) { s.db = db }

// Unregister implements pebble.CompactionScheduler: it stops the granter
// and waits for it.
func (s *lazyCompactionScheduler) Unregister() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.stop)
	s.wg.Wait()
}

// TrySchedule implements pebble.CompactionScheduler.
func (s *lazyCompactionScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, nil
	}
	if s.db.GetAllowedWithoutPermission() > s.running {
		s.running++
		return true, s
	}
	// Pebble now waits for Schedule and asks no more until told no
	// compaction is waiting: keep a granter running until then.
	s.refused++
	if !s.granter {
		s.granter = true
		s.wg.Add(1)
		go s.grantLoop()
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
func (s *lazyCompactionScheduler) UpdateGetAllowedWithoutPermission() { s.wakeGranter() }

// Started implements pebble.CompactionGrantHandle.
func (s *lazyCompactionScheduler) Started() {}

// MeasureCPU implements pebble.CompactionGrantHandle.
func (s *lazyCompactionScheduler) MeasureCPU(pebble.CompactionGoroutineKind) {}

// CumulativeStats implements pebble.CompactionGrantHandle.
func (s *lazyCompactionScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle.
func (s *lazyCompactionScheduler) Done() {
	s.mu.Lock()
	s.running--
	s.mu.Unlock()
	s.wakeGranter()
}

func (s *lazyCompactionScheduler) wakeGranter() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// grantLoop grants waiting compactions while there is room, on every
// poke and every compactGrantEvery, and ends once Pebble has none waiting
// and no refusal came meanwhile.
func (s *lazyCompactionScheduler) grantLoop() {
	defer s.wg.Done()
	t := time.NewTicker(compactGrantEvery)
	defer t.Stop()
	for {
		if s.grant() {
			return
		}
		select {
		case <-s.stop:
			return
		case <-s.poke:
		case <-t.C:
		}
	}
}

// grant starts waiting compactions while the allowed count has room. It
// reports true when the granter is done: Pebble waits for nothing.
func (s *lazyCompactionScheduler) grant() bool {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return true
		}
		refused := s.refused
		room := s.db.GetAllowedWithoutPermission() > s.running
		if room {
			s.running++ // reserved for the grant below
		}
		s.mu.Unlock()
		if !room {
			return false
		}
		if waiting, _ := s.db.GetWaitingCompaction(); waiting && s.db.Schedule(s) {
			continue
		}
		s.mu.Lock()
		s.running--
		// Nothing waits; but a refusal since the check above means Pebble
		// waits again, and this granter is the one that must serve it.
		done := s.refused == refused || s.closed
		if done {
			s.granter = false
		}
		s.mu.Unlock()
		if done {
			return true
		}
	}
}
