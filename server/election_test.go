package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paxlock/paxlock/client"
)

// TestElectionMasterChange: candidates on three clients campaign, lead
// for a moment and resign, while the master of the election key's group
// is stopped and restarted; an observer on a fourth client follows the
// election throughout. At no moment do two candidates lead, every new
// leader's token is higher than every earlier leader's, the observer never
// delivers a lower token than before, and after the master change it
// delivers the last leader (a final campaign's value and token): Observe
// re-registers across the master change without missing the latest
// leader.
func TestElectionMasterChange(t *testing.T) {
	t.Parallel()
	tc := startCluster(t, 3)
	clients := []*client.Client{newClient(t, tc), newClient(t, tc), newClient(t, tc)}
	watcher := newClient(t, tc)
	ctx := ctxT(t)
	const name = "leader"

	octx, ostop := context.WithCancel(ctx)
	defer ostop()
	var (
		omu      sync.Mutex
		observed []client.Leader
	)
	odone := make(chan struct{})
	go func() {
		defer close(odone)
		for l := range watcher.Election(name).Observe(octx) {
			omu.Lock()
			observed = append(observed, l)
			omu.Unlock()
		}
	}()

	var (
		mu      sync.Mutex
		leading int    // candidates that believe they lead now
		highest uint64 // highest token a candidate has led with
		terms   atomic.Int64
		bad     atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := clients[w%len(clients)].Election(name, client.TTL(10*time.Second))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := e.Campaign(cctx, fmt.Sprintf("w%d-%d", w, i))
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				tok := e.Token()
				mu.Lock()
				if leading++; leading > 1 {
					bad.Add(1)
					t.Errorf("%d candidates lead at once (w%d with token %d)", leading, w, tok)
				}
				if tok <= highest {
					bad.Add(1)
					t.Errorf("w%d leads with token %d, not above an earlier leader's %d", w, tok, highest)
				}
				highest = max(highest, tok)
				mu.Unlock()
				if i%3 == 0 { // a leader changes its value without a new term
					if err := e.Proclaim(ctx, fmt.Sprintf("w%d-%d'", w, i)); err != nil {
						t.Logf("proclaim: %v", err)
					}
				}
				select {
				case <-e.Lost():
					t.Logf("w%d lost leadership (token %d)", w, tok)
				case <-time.After(2 * time.Millisecond):
				}
				mu.Lock()
				leading--
				mu.Unlock()
				if err := e.Resign(ctx); err != nil {
					t.Logf("resign: %v", err)
				}
				terms.Add(1)
			}
		}()
	}
	waitFor(t, "leaders", func() bool { return terms.Load() > 20 })
	victim := keyMaster(t, tc, name)
	tc.stop(victim)
	before := terms.Load()
	waitFor(t, "leaders after the master change", func() bool { return terms.Load() > before+20 })
	tc.start(victim)
	before = terms.Load()
	waitFor(t, "leaders after the restart", func() bool { return terms.Load() > before+20 })
	close(stop)
	wg.Wait()
	if bad.Load() > 0 {
		t.Fatalf("%d violations", bad.Load())
	}

	// The last leader: the observer must deliver it.
	final := clients[0].Election(name, client.TTL(10*time.Second))
	if err := final.Campaign(ctx, "final"); err != nil {
		t.Fatal(err)
	}
	want := final.Token()
	waitFor(t, "the observer to deliver the final leader", func() bool {
		omu.Lock()
		defer omu.Unlock()
		return len(observed) > 0 && observed[len(observed)-1].Token == want && observed[len(observed)-1].Value == "final"
	})
	ostop()
	<-odone
	var prev uint64
	for _, l := range observed {
		if l.Token < prev {
			t.Errorf("observer delivered token %d after %d", l.Token, prev)
		}
		prev = l.Token
	}
	t.Logf("%d terms, observer delivered %d leaders", terms.Load(), len(observed))
	if err := final.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
