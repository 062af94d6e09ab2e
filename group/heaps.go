package group

import (
	"time"

	"github.com/paxlock/paxlock/wire"
)

// expiry is a hold's deadline on the master. A hold is named by token and
// owner (readers granted in one command share a token). The expiry heap
// holds one entry per deadline set; the worker's times carry the current
// one (holdTime.at), so an entry whose hold was renewed,
// released or expired meanwhile is recognised and skipped when it comes
// up. A held key needs no keyState on the master: this entry (56 bytes)
// is all it costs there.
type expiry struct {
	at    int64 // on the worker's clock, see worker.mono
	key   string
	token uint64
	owner wire.Owner
	sink  *sinkRef // nil: nobody to tell
}

// expiryHeap is a min-heap of deadlines (by hand: container/heap would
// box every entry).
type expiryHeap []expiry

func (h *expiryHeap) push(e expiry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *expiryHeap) down(i int) {
	s := *h
	for {
		l := 2*i + 1
		if l >= len(s) {
			return
		}
		m := l
		if r := l + 1; r < len(s) && s[r].at < s[l].at {
			m = r
		}
		if s[i].at <= s[m].at {
			return
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
}

func (h *expiryHeap) pop() expiry {
	s := *h
	e := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = expiry{}
	*h = s[:n]
	h.down(0)
	if cap(s) >= 4096 && n < cap(s)/4 {
		// Most deadlines passed: give the memory back.
		*h = append(make(expiryHeap, 0, 2*n), s[:n]...)
	}
	return e
}

func (h *expiryHeap) init() {
	for i := len(*h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

type timerKind uint8

const (
	tWait timerKind = iota
	tWatch
	tDelay // the end of a key's lock-delay (lockdelay.go)
)

// timerEntry is a waiter's or a watch's deadline.
type timerEntry struct {
	at   time.Time
	kind timerKind
	key  string
	w    *waiter
	wt   *watcher
}

type timerHeap []timerEntry

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }

func (h timerHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }

func (h *timerHeap) Push(x any) { *h = append(*h, x.(timerEntry)) }

func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
