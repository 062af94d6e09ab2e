package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Subscribe returns a channel that receives a value after membership
// changes: a join, a leave, a metadata update, a member turning suspect or
// recovering. Signals coalesce (the channel holds one), so a receiver reads
// Members after each and never misses the latest state. The channel is
// closed by cancel or by Stop. Receivers must not assume a signal
// means anything changed that they care about.
func (m *Membership) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	m.mu.Lock()
	if m.phase.Load() == phaseShut {
		m.mu.Unlock()
		close(ch)
		return ch, func() {}
	}
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			m.mu.Lock()
			if _, ok := m.subs[ch]; ok {
				delete(m.subs, ch)
				close(ch)
			}
			m.mu.Unlock()
		})
	}
}

// notifyLocked queues ev and signals the dispatcher and subscribers. m.mu
// is held; nothing here blocks.
func (m *Membership) notifyLocked(ev Event) {
	m.queue = append(m.queue, ev)
	select {
	case m.kick <- struct{}{}:
	default:
	}
	for ch := range m.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// observe records what a memberlist callback reported. It runs under
// memberlist's node lock: it must not call memberlist or block.
func (m *Membership) observe(kind EventKind, n *memberlist.Node) {
	if n == nil {
		return
	}
	addr := n.Address()
	raw := bytes.Clone(n.Meta)
	meta, merr := DecodeMeta(raw)
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[n.Name]
	if r == nil {
		r = &memberRec{name: n.Name, local: n.Name == m.cfg.Name}
		m.members[n.Name] = r
	}
	switch kind {
	case EventJoin:
		r.state, r.since, r.aliveSince, r.leaving = StateAlive, now, now, false
	case EventUpdate:
		if r.state.Live() && r.addr == addr && bytes.Equal(r.raw, raw) {
			return
		}
		if !r.state.Live() {
			// An update for a member we saw leave: treat it as a join.
			kind = EventJoin
			r.state, r.since, r.aliveSince, r.leaving = StateAlive, now, now, false
		}
	case EventLeave:
		r.state, r.since = StateDead, now
		if r.leaving || (merr == nil && meta.Leaving) || (r.metaErr == nil && r.meta.Leaving) {
			r.state = StateLeft
		}
	}
	r.addr, r.raw, r.meta, r.metaErr = addr, raw, meta, merr
	m.notifyLocked(Event{Kind: kind, Member: r.member()})
}

// dispatch delivers queued events to the log and OnEvent, and re-checks
// suspicion every probe interval.
func (m *Membership) dispatch() {
	defer m.wg.Done()
	tick := time.NewTicker(m.timing.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-m.kick:
		case <-tick.C:
			m.checkSuspects()
		}
		m.mu.Lock()
		q := m.queue
		m.queue = nil
		m.mu.Unlock()
		for _, ev := range q {
			lvl := slog.LevelInfo
			if ev.Kind == EventUpdate {
				lvl = slog.LevelDebug
			}
			m.log.Log(context.Background(), lvl, "membership: "+ev.Kind.String(), "member", ev.Member.Name,
				"id", ev.Member.ID, "gossip", ev.Member.GossipAddr, "state", ev.Member.State)
			if m.cfg.OnEvent != nil {
				m.cfg.OnEvent(ev)
			}
		}
	}
}

// suspectAfter is how long a live member may go without answering this
// node's direct probes before it counts as suspect. memberlist probes one
// member per interval in a shuffled round-robin, so a given member is
// probed at least once every 2*peers intervals; the interval stretches by
// the local health score under load.
func (m *Membership) suspectAfter(peers, health int) time.Duration {
	if m.timing.SuspectAfter > 0 {
		return m.timing.SuspectAfter
	}
	return m.timing.ProbeTimeout + m.timing.ProbeInterval*time.Duration((health+1)*(2*peers+2))
}

// checkSuspects moves live members between StateAlive and StateSuspect and
// forgets dead ones after DeadRetention. It calls memberlist only outside
// m.mu.
func (m *Membership) checkSuspects() {
	health := 0
	if ml := m.ml.Load(); ml != nil {
		health = ml.GetHealthScore()
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	peers := 0
	for _, r := range m.members {
		if !r.local && r.state.Live() {
			peers++
		}
	}
	limit := m.suspectAfter(peers, health)
	for name, r := range m.members {
		if !r.state.Live() {
			if now.Sub(r.since) > m.timing.DeadRetention {
				delete(m.members, name)
			}
			continue
		}
		if r.local {
			continue
		}
		last := r.aliveSince
		if r.lastAck.After(last) {
			last = r.lastAck
		}
		want := StateAlive
		if now.Sub(last) > limit {
			want = StateSuspect
		}
		if want == r.state {
			continue
		}
		r.state, r.since = want, now
		kind := EventSuspect
		if want == StateAlive {
			kind = EventRecover
		}
		m.notifyLocked(Event{Kind: kind, Member: r.member()})
	}
}
