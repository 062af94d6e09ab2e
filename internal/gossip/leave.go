package gossip

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Leave announces that this node is leaving, so that the others mark it
// StateLeft at once rather than detecting a failure. It gossips metadata
// with Leaving set, tells every live member directly over TCP, then sends
// memberlist's leave message, and waits until that went out or ctx ends
// (5s if ctx has no deadline). Call Stop afterwards. Leave stops the
// re-joining of seeds.
func (m *Membership) Leave(ctx context.Context) error {
	if err := m.acquire(ctx); err != nil {
		return err
	}
	if m.phase.Load() != phaseRunning {
		m.release()
		return ErrNotRunning
	}
	m.phase.Store(phaseLeft)
	m.metaMu.Lock()
	meta := m.meta
	m.meta.Leaving = true
	m.metaMu.Unlock()
	if _, err := m.setMeta(meta); err != nil {
		m.log.Warn("membership: cannot mark metadata as leaving", "err", err)
	}
	ml := m.ml.Load()
	return m.runOp(ctx, func(timeout time.Duration) error {
		start := time.Now()
		if err := ml.UpdateNode(timeout / 3); err != nil {
			m.log.Debug("membership: leaving flag not broadcast", "err", err)
		}
		m.announce(ml, userMsgLeaving, timeout/3)
		if err := ml.Leave(max(timeout-time.Since(start), time.Millisecond)); err != nil {
			return fmt.Errorf("gossip: membership: leave: %w", err)
		}
		m.log.Info("membership left", "name", m.cfg.Name)
		return nil
	})
}

// MarkLeaving tells the other members that this node is about to leave,
// without leaving yet: its metadata says Leaving, so that placement
// stops choosing it (LiveIDs), and every live member hears so directly
// over TCP; the node stays a live member, gossiping and reachable, until
// Leave. It waits until the broadcast went out or ctx ends (5s if ctx has
// no deadline).
func (m *Membership) MarkLeaving(ctx context.Context) error { return m.setLeaving(ctx, true) }

// UnmarkLeaving undoes MarkLeaving: the metadata no longer says
// Leaving, so that placement chooses this node again, and every live
// member hears so directly over TCP (which clears what MarkLeaving's
// direct notice told it). It waits until the broadcast went out or ctx
// ends (5s if ctx has no deadline).
func (m *Membership) UnmarkLeaving(ctx context.Context) error { return m.setLeaving(ctx, false) }

// setLeaving is MarkLeaving (leaving) and UnmarkLeaving (not leaving).
func (m *Membership) setLeaving(ctx context.Context, leaving bool) error {
	what, kind := "leaving", byte(userMsgLeaving)
	if !leaving {
		what, kind = "staying", userMsgStaying
	}
	if err := m.acquire(ctx); err != nil {
		return err
	}
	if m.phase.Load() != phaseRunning {
		m.release()
		return ErrNotRunning
	}
	m.metaMu.Lock()
	m.meta.Leaving = leaving
	meta := m.meta
	m.metaMu.Unlock()
	if _, err := m.setMeta(meta); err != nil {
		m.release()
		return fmt.Errorf("gossip: membership: mark %s: %w", what, err)
	}
	ml := m.ml.Load()
	return m.runOp(ctx, func(timeout time.Duration) error {
		if err := ml.UpdateNode(timeout / 2); err != nil {
			m.log.Debug("membership: "+what+" flag not broadcast", "err", err)
		}
		m.announce(ml, kind, timeout/2)
		return nil
	})
}

// User messages between Memberships: a version byte, a kind byte, then
// the kind's body.
const (
	userMsgVersion = 1
	// userMsgLeaving's body is the sender's memberlist name.
	userMsgLeaving = 1
	// userMsgStaying (UnmarkLeaving) has the same body: the sender is no
	// longer leaving.
	userMsgStaying = 2
)

// announce tells every other live member, over TCP, that this node is
// leaving (kind userMsgLeaving) or no longer is (userMsgStaying). Gossip alone does not order the Leaving metadata before
// memberlist's leave message (a member may hear the leave first, from a
// relay, and then drop the older metadata), so a member could not tell a
// leave from a crash; the direct message lets it, in either order. It
// waits at most timeout.
func (m *Membership) announce(ml *memberlist.Memberlist, kind byte, timeout time.Duration) {
	msg := append([]byte{userMsgVersion, kind}, m.cfg.Name...)
	// The addresses come from Membership's own table: the *Node values
	// memberlist.Members returns point into its state and are written
	// under its lock after Members returns, so reading them races.
	var peers []memberlist.Node
	m.mu.Lock()
	for _, r := range m.members {
		if r.local || !r.state.Live() {
			continue
		}
		host, port, err := splitHostPort(r.addr)
		if ip := net.ParseIP(host); err == nil && ip != nil {
			peers = append(peers, memberlist.Node{Name: r.name, Addr: ip, Port: uint16(port)})
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, node := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ml.SendReliable(&node, msg); err != nil {
				m.log.Debug("membership: leaving notice not delivered", "member", node.Name, "err", err)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}

// userMsg handles a message from another Membership. It runs on
// memberlist's receive path: it must not block or call memberlist.
func (m *Membership) userMsg(b []byte) {
	if len(b) < 2 || b[0] != userMsgVersion || (b[1] != userMsgLeaving && b[1] != userMsgStaying) || len(b) > 2+MaxAddrLen {
		return
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.members[string(b[2:])]
	if r == nil || r.local {
		return
	}
	if b[1] == userMsgStaying {
		if r.leaving && r.state.Live() {
			r.leaving = false
			m.notifyLocked(Event{Kind: EventUpdate, Member: r.member()})
		}
		return
	}
	if r.leaving {
		return
	}
	r.leaving = true
	if r.state == StateDead {
		// memberlist's leave message overtook the notice.
		r.state, r.since = StateLeft, now
	}
	m.notifyLocked(Event{Kind: EventUpdate, Member: r.member()})
}
