package group

import (
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// expiry is a hold's deadline on the master, as it came up (see
// holdTimes.pop) or as the hold is now (see worker.expiryOf). A hold is
// named by token and owner (readers granted in one command share a
// token).
type expiry struct {
	at    int64 // on the worker's clock, see worker.mono
	key   string
	token uint64
	owner wire.Owner
	sink  *sinkRef // nil: nobody to tell
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
