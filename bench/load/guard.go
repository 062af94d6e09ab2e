package load

import "sync/atomic"

// Guard counts the overlapping holds the harness itself observes on a fixed
// set of hot keys: per key, an atomic holder word is set right after an
// acquire returns and cleared right before the release is sent, so any
// overlap it sees really happened (a lock lost to expiry included). It also
// checks that the fencing tokens of one key never go backwards.
//
// Keys are identified by their index in the hot-key set; fresh keys, which
// only their own worker ever touches, are not guarded.
type Guard struct {
	slots       []guardSlot
	overlaps    atomic.Int64
	regressions atomic.Int64
}

// The holder word: writers (or exclusive holders) count from bit 32 up,
// readers in the low 32 bits.
const writerUnit = int64(1) << 32

type guardSlot struct {
	holders   atomic.Int64
	writerTok atomic.Uint64 // token of the last exclusive holder
	readerMax atomic.Uint64 // largest token a reader entered with
	_         [40]byte      // one slot per cache line
}

// NewGuard returns a Guard for keys 0..n-1.
func NewGuard(n int) *Guard {
	return &Guard{slots: make([]guardSlot, n)}
}

// Enter records that a holder of key i in mode m, with fencing token tok (0
// for none), now holds the lock. It reports whether the hold overlaps one
// that must exclude it.
func (g *Guard) Enter(i int, m Mode, tok uint64) (overlap bool) {
	s := &g.slots[i]
	if m == Read {
		prev := s.holders.Add(1) - 1
		overlap = prev >= writerUnit
	} else {
		prev := s.holders.Add(writerUnit) - writerUnit
		overlap = prev != 0
	}
	if overlap {
		g.overlaps.Add(1)
	}
	if tok != 0 {
		g.checkToken(s, m, tok)
	}
	return overlap
}

// checkToken: an exclusive holder's token must exceed every token granted
// before it; a reader's must not be below the last writer's (readers may
// enter in any order among themselves).
func (g *Guard) checkToken(s *guardSlot, m Mode, tok uint64) {
	if m == Read {
		if tok < s.writerTok.Load() {
			g.regressions.Add(1)
		}
		for {
			cur := s.readerMax.Load()
			if tok <= cur || s.readerMax.CompareAndSwap(cur, tok) {
				return
			}
		}
	}
	if tok <= s.writerTok.Load() || tok <= s.readerMax.Load() {
		g.regressions.Add(1)
	}
	s.writerTok.Store(tok)
}

// Exit records that the holder of key i in mode m is about to release.
func (g *Guard) Exit(i int, m Mode) {
	if m == Read {
		g.slots[i].holders.Add(-1)
	} else {
		g.slots[i].holders.Add(-writerUnit)
	}
}

// Overlaps is the number of overlapping holds seen.
func (g *Guard) Overlaps() int64 { return g.overlaps.Load() }

// TokenRegressions is the number of fencing tokens that did not increase.
func (g *Guard) TokenRegressions() int64 { return g.regressions.Load() }
