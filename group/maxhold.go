package group

// Maximum hold time. An acquire may bound how long its hold lasts,
// renewals or not (Request.MaxHoldMs, at most wire.MaxHoldLimitMs): a
// stuck process that keeps renewing must not hold a key for ever.
//
// The bound is replicated with the hold (recExt.maxHolds; lock records of
// version 6, semaphore records of version 7, written only when a hold has
// one; the command tail's cmdHasMaxHold fields), so every master knows
// it. The moment the count starts is master-only soft state, as deadlines
// are (invariant I6): the master that grants the hold counts from the
// grant on its own monotonic clock (holdSlot.start, holdSlot.limit); a
// new master cannot know when the old one granted it and counts a full
// bound from the moment it takes over, as it gives a held lock a full TTL. A hold therefore
// lasts at least its bound (rounded up to its TTL), and at most that plus
// one bound per master change, the conservative direction for liveness.
//
// The master caps the hold's deadline at its limit: a renewal moves the
// deadline to at most the limit, never past it. When the limit comes the
// master ends the hold as it ends an expired one, with an opExpire that
// grants the key's waiters in the same command and starts the hold's
// lock-delay; the holder is pushed Lost EventHoldLimit and the watchers
// hear EventHoldLimit. No revocation phase is needed first (as an
// operator's force-unlock has, see revocation.go): the client chose the
// bound and stops trusting the hold by its send time plus the bound,
// before the master's count, which starts at the grant, runs out.

import (
	"context"
	"fmt"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// Lock record versions with maximum hold times: version 4's and 5's
// layouts with each hold's bound after its delay.
const (
	maxHoldRecVersion    = 6
	semMaxHoldRecVersion = 7
)

// cmdHasMaxHold, in a command tail's flags, says maximum hold times follow
// the lock-delays (see appendCommand):
//
//	maxHold = maxHoldMs uvarint, grantMaxHolds uvarint, grantMaxHolds × maxHoldMs uvarint
const cmdHasMaxHold = 1 << 4

// maxHoldAt returns hold i's maximum hold time in milliseconds (0: none).
func (l *lockRec) maxHoldAt(i int) uint32 {
	if l == nil || l.x == nil || i >= len(l.x.maxHolds) {
		return 0
	}
	return l.x.maxHolds[i]
}

// setMaxHold sets hold i's maximum hold time.
func (l *lockRec) setMaxHold(i int, ms uint32) {
	if ms == 0 && (l.x == nil || i >= len(l.x.maxHolds)) {
		return
	}
	if l.x == nil {
		l.x = &recExt{}
	}
	for len(l.x.maxHolds) <= i {
		l.x.maxHolds = append(l.x.maxHolds, 0)
	}
	l.x.maxHolds[i] = ms
	l.trim()
}

// hasMaxHolds reports whether a hold of l has a maximum hold time.
func (l *lockRec) hasMaxHolds() bool {
	return l != nil && l.x != nil && len(l.x.maxHolds) > 0
}

// hasMaxHold reports whether c carries a maximum hold time.
func (c *command) hasMaxHold() bool { return hasGrantField(c.maxHoldMs, c.grants, grantMaxHold) }

// appendMaxHold writes a command's maximum hold times (see appendCommand).
func appendMaxHold(dst []byte, c *command) []byte {
	return appendGrantField(dst, c.maxHoldMs, c.grants, grantMaxHold)
}

func grantMaxHold(g *grant) uint32 { return g.maxHoldMs }

// decodeMaxHold reads what appendMaxHold wrote; a bound over
// wire.MaxHoldLimitMs is an error.
func decodeMaxHold(r *reader, c *command) {
	c.maxHoldMs = r.maxHold()
	r.perGrant(c, func(g *grant) { g.maxHoldMs = r.maxHold() })
}

// maxHold reads a maximum hold time, at most wire.MaxHoldLimitMs.
func (r *reader) maxHold() uint32 {
	v := r.u32()
	if v > wire.MaxHoldLimitMs {
		r.Fail()
		return 0
	}
	return v
}

// On the master.

// maxHoldOf returns the maximum hold time r asks for, in milliseconds, at
// most wire.MaxHoldLimitMs.
func maxHoldOf(r *Request) uint32 {
	return min(r.MaxHoldMs, wire.MaxHoldLimitMs)
}

// holdBound returns how long after its count starts a hold with TTL ttl
// and bound maxHold (0: none) ends, in milliseconds (0: never; see
// holdSlot.limit). A bound below the TTL is raised to it: the server's
// default TTL (an acquire that asked for none) may be longer than the
// bound asked for. Both are whole milliseconds of at most 2^32-1.
func holdBound(ttl, maxHold time.Duration) uint32 {
	if maxHold <= 0 {
		return 0
	}
	return uint32(max(maxHold, ttl) / time.Millisecond)
}

// capDeadline returns deadline at capped at slot s's limit, if it has one.
func capDeadline(s *holdSlot, at int64) int64 {
	if l := s.limit(); l != 0 && at > l {
		return l
	}
	return at
}

// pastLimit reports whether the deadline at that came up for the hold
// (key, o, token) is its hold limit rather than its TTL.
func (w *worker) pastLimit(key string, o wire.Owner, token uint64, at int64) bool {
	i := w.times.find(key, o, token)
	if i < 0 {
		return false
	}
	s := &w.times.slots[i]
	return s.bound != 0 && at >= s.limit()
}

// longHolds counts the holds of the worker, as master, that it has
// served for longer than threshold: a scan of its deadline table, run on
// the worker's goroutine when a metrics scrape asks (evLongHolds).
func (w *worker) longHolds(threshold time.Duration) int {
	if !w.serving || threshold <= 0 {
		return 0
	}
	cut := w.mono(w.clock.Now()) - int64(threshold)
	n := 0
	w.times.each(func(s *holdSlot, key string) {
		if s.start < cut && w.isCurrent(s, key) {
			n++
		}
	})
	return n
}

// LongHolds returns how many holds the groups this node serves have
// served for longer than threshold (counted from the grant, or from the
// moment this node became their master, whichever was later). Each
// worker of each serving group counts its own when it next runs, between
// requests; nothing is counted on the request path. It returns what it
// has with ctx's error if ctx ends first.
func (s *Service) LongHolds(ctx context.Context, threshold time.Duration) (int, error) {
	if threshold <= 0 {
		return 0, nil
	}
	posted := 0
	ch := make(chan int, len(s.groups)*s.cfg.Workers)
	for _, g := range s.groups {
		if !g.Serving() {
			continue
		}
		for _, w := range g.workers {
			posted++
			w.post(event{kind: evLongHolds, counted: func(n int) { ch <- n }, since: threshold})
		}
	}
	total := 0
	for range posted {
		select {
		case n := <-ch:
			total += n
		case <-ctx.Done():
			return total, fmt.Errorf("group: long holds: %w", ctx.Err())
		}
	}
	return total, nil
}
