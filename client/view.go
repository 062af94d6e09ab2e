// This file keeps the cluster view: which node masters each group, fetched
// and subscribed to from the registry and the nodes.

package client

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// refreshWide asks the background loop to re-read the view soon, from
// other nodes as well as the subscribed one: a group's master said it
// serves nothing, or the view names none. The subscribed node's view can
// be stale when that node is cut off from its peers (it still names itself
// as the master of the groups it lost); the other nodes' views carry the
// new masters with higher ballots, so updateView takes theirs.
func (c *Client) refreshWide() {
	c.wide.Store(true)
	c.refresh()
}

// refresh asks the background loop to re-read the view soon.
func (c *Client) refresh() {
	select {
	case c.refreshCh <- struct{}{}:
	default:
	}
}

// noteViewVersion refreshes the view if a server knows a newer one.
func (c *Client) noteViewVersion(v uint64) {
	if cur := c.view.Load(); v != 0 && (cur == nil || newer(cur.Version, v)) {
		c.refresh()
	}
}

// asServed returns version v as the current view's version v is compared
// with: a registry that serves the namespace from its replicated tables
// puts the namespace's assignment epoch in the high bits of a view's
// version (wire.RegistryViewVersion), and a cluster's node, which knows
// no epochs, serves the bare version; such a view is the same cluster's,
// read from one of its nodes, and counts with the current view's epoch.
// So a client that fails over from registries to the nodes keeps
// following the cluster, and a registry's view of a new assignment (a
// higher epoch) is newer whatever its cluster's own version.
func asServed(cur, v uint64) uint64 {
	if e := wire.ViewEpoch(cur); e > 0 && wire.ViewEpoch(v) == 0 {
		return wire.RegistryViewVersion(e, v)
	}
	return v
}

// newer reports whether a view of version v is newer than one of cur.
func newer(cur, v uint64) bool { return asServed(cur, v) > cur }

// updateView installs v if it is newer than the current view, and moves
// blocked acquires and watches whose group master changed.
func (c *Client) updateView(v *wire.View) bool {
	if c.leftCluster(v) {
		return false // the cluster the namespace moved away from
	}
	return c.installView(v, false)
}

// installView installs v if it is newer than the current view, or
// whatever its version with force (a view of the cluster a namespace
// moved to: its versions are not comparable with the old cluster's), and
// moves blocked acquires and watches whose group master changed.
func (c *Client) installView(v *wire.View, force bool) bool {
	c.viewMu.Lock()
	cur := c.view.Load()
	if cur != nil {
		if !force && !newer(cur.Version, v.Version) {
			c.viewMu.Unlock()
			return false
		}
		if ver := asServed(cur.Version, v.Version); ver != v.Version {
			cp := *v
			cp.Version = ver
			v = &cp
		}
	}
	c.view.Store(v)
	next := make(chan struct{})
	close(*c.viewCh.Swap(&next))
	c.viewMu.Unlock()
	c.log.Debug("paxlock: view", "version", v.Version, "groups", len(v.Groups), "nodes", len(v.Nodes))

	c.mu.Lock()
	for _, w := range c.waits {
		if w.conn == nil || w.abandoned {
			continue
		}
		if newTerm(cur, v, wire.GroupOf(w.hash, len(v.Groups)), w.master) {
			w.signalResend()
		}
	}
	var rereg []*Watcher
	for _, w := range c.watches {
		if w.conn == nil {
			continue
		}
		if newTerm(cur, v, wire.GroupOf(w.hash, len(v.Groups)), w.master) {
			w.conn = nil
			rereg = append(rereg, w)
		}
	}
	dial := c.newHoldMastersLocked(cur, v)
	c.mu.Unlock()
	for _, w := range rereg {
		w.reregister()
	}
	for _, addr := range dial {
		go c.connectTo(addr)
	}
	return true
}

// newHoldMastersLocked lists the masters in view v of the groups where
// the client holds a lock and whose master is not the one of view cur;
// c.mu is held. The client connects to each, so that the new master can
// tell it of a loss (a force-unlock's revocation, an expiry) over a
// connection of its own: a hold granted under another master names no
// connection on the new one.
func (c *Client) newHoldMastersLocked(cur, v *wire.View) []string {
	var out []string
	for _, h := range c.holds {
		g := wire.GroupOf(h.hash, len(v.Groups))
		addr, ok := v.MasterAddr(g)
		if !ok || slices.Contains(out, addr) {
			continue
		}
		if cur != nil && len(cur.Groups) == len(v.Groups) {
			if was, ok := cur.MasterAddr(g); ok && was == addr {
				continue
			}
		}
		out = append(out, addr)
	}
	return out
}

// connectTo opens a connection to addr if the client has none, within
// the request timeout.
func (c *Client) connectTo(addr string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout)
	defer cancel()
	if _, err := c.getConn(ctx, addr); err != nil {
		c.log.Debug("paxlock: connect to a new master of a held lock", "addr", addr, "err", err)
	}
}

// newTerm reports whether view v names a master for group g other than
// master, the one a wait or watch was registered with, or shows that g's
// master began a new term since view cur (it stepped down and was elected
// again). A master keeps waits and watches in memory for one term only, so
// either way they must be sent again; re-sending one that survived is
// harmless (same WaitID, duplicate events dropped).
func newTerm(cur, v *wire.View, g int, master string) bool {
	addr, ok := v.MasterAddr(g)
	if !ok {
		return false // no master yet: the next view will tell
	}
	if addr != master {
		return true
	}
	if cur == nil || len(cur.Groups) != len(v.Groups) {
		return false
	}
	was := cur.Groups[g]
	return was.Addr == master && was.Epoch != v.Groups[g].Epoch
}

// masterAddr returns the address of the master of key's group in the
// current view.
func (c *Client) masterAddr(hash uint64) (string, bool) {
	v := c.view.Load()
	if v == nil {
		return "", false
	}
	return v.MasterAddr(wire.GroupOf(hash, len(v.Groups)))
}

// candidates lists the addresses to fetch the view from: the view's nodes
// (alive ones first), then the configured registry addresses. A view
// served by a registry from its replicated tables (an epoch in its
// version) puts the configured addresses, the registries, first: a
// client that loses its registry fails over to another, which pushes it
// the namespace's next assignment, and to the cluster's nodes only when
// no registry answers.
func (c *Client) candidates() []string {
	var out []string
	seen := make(map[string]bool)
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	v := c.view.Load()
	if v != nil && wire.ViewEpoch(v.Version) > 0 {
		for _, a := range c.cfg.Registry {
			add(a)
		}
	}
	if v != nil {
		nodes := slices.Clone(v.Nodes)
		mrand.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		slices.SortStableFunc(nodes, func(a, b wire.NodeView) int {
			switch {
			case a.Alive == b.Alive:
				return 0
			case a.Alive:
				return -1
			}
			return 1
		})
		for _, n := range nodes {
			add(n.Addr)
		}
	}
	for _, a := range c.cfg.Registry {
		add(a)
	}
	return out
}

// subscribe fetches the view from the first candidate that answers and
// subscribes to its changes there. AUTH_FAILED ends it at once.
func (c *Client) subscribe(ctx context.Context) error {
	var errs []error
	for _, addr := range c.candidates() {
		err := c.subscribeAt(ctx, addr)
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrAuth) || errors.Is(err, ErrClosed) {
			return err
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		errs = append(errs, ctx.Err())
	}
	return fmt.Errorf("%w: no node answered: %w", ErrUnavailable, errors.Join(errs...))
}

func (c *Client) subscribeAt(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout+c.cfg.RequestTimeout)
	defer cancel()
	cn, err := c.getConn(ctx, addr)
	if err != nil {
		return err
	}
	v, err := c.fetchView(ctx, cn, wire.TypeSubscribeView)
	if err != nil {
		return err
	}
	if len(v.Groups) == 0 {
		return fmt.Errorf("%w: view from %s lists no groups", ErrServer, addr)
	}
	c.updateView(v)
	c.mu.Lock()
	if !cn.dead() {
		c.subConn = cn
	}
	c.mu.Unlock()
	if cn.dead() {
		return fmt.Errorf("%w: %s closed", ErrUnavailable, addr)
	}
	return nil
}

func (c *Client) fetchView(ctx context.Context, cn *conn, typ wire.Type) (*wire.View, error) {
	var m wire.Message = &wire.GetView{}
	if typ == wire.TypeSubscribeView {
		m = &wire.SubscribeView{}
	}
	rt, msg, err := cn.roundTrip(ctx, typ, m, c.cfg.RequestTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w: view from %s: %w", ErrUnavailable, cn.addr, err)
	}
	switch r := msg.(type) {
	case *wire.View:
		return r, nil
	case *wire.Response:
		if r.Status == wire.StatusAuthFailed {
			return nil, fmt.Errorf("%w: view from %s", ErrAuth, cn.addr)
		}
		return nil, statusErr("view", cn.addr, r)
	}
	return nil, fmt.Errorf("%w: view from %s: unexpected %s", ErrServer, cn.addr, rt)
}

// loop keeps the view fresh: it re-subscribes when the subscription's
// connection fails, re-reads the view when asked (redirects, NO_MASTER,
// lost connections, a newer version seen in a heartbeat) and every
// ViewRefresh.
func (c *Client) loop() {
	defer close(c.loopDone)
	tick := time.NewTicker(c.cfg.ViewRefresh)
	defer tick.Stop()
	failures := 0
	var retry <-chan time.Time
	for {
		select {
		case <-c.done:
			return
		case <-c.subLostCh:
		case <-c.refreshCh:
		case <-tick.C:
		case <-retry:
		}
		retry = nil
		if err := c.refreshOnce(); err != nil {
			failures++
			c.log.Debug("paxlock: view refresh failed", "err", err)
			retry = time.After(c.backoff(failures))
			continue
		}
		failures = 0
		// Coalesce bursts of refresh requests.
		if c.sleep(context.Background(), c.cfg.RetryBackoff) != nil {
			return
		}
	}
}

func (c *Client) refreshOnce() error {
	if err := c.resolveMove(); err != nil {
		return err
	}
	c.mu.Lock()
	sub := c.subConn
	c.mu.Unlock()
	var err error
	if sub == nil || sub.dead() {
		err = c.subscribe(c.ctx)
	} else {
		var v *wire.View
		if v, err = c.fetchView(c.ctx, sub, wire.TypeGetView); err == nil {
			c.updateView(v)
		}
	}
	if c.wide.Swap(false) {
		c.refreshFromOthers()
	}
	return err
}

// widePeers is how many nodes besides the subscribed one a wide refresh
// asks for their view.
const widePeers = 2

// refreshFromOthers reads the view from up to widePeers nodes other than
// the subscribed one and installs the newest.
func (c *Client) refreshFromOthers() {
	c.mu.Lock()
	var skip string
	if c.subConn != nil {
		skip = c.subConn.addr
	}
	c.mu.Unlock()
	asked := 0
	for _, addr := range c.candidates() {
		if addr == skip || c.unreachable(addr) {
			continue
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.DialTimeout+c.cfg.RequestTimeout)
		cn, err := c.getConn(ctx, addr)
		if err == nil {
			var v *wire.View
			if v, err = c.fetchView(ctx, cn, wire.TypeGetView); err == nil && len(v.Groups) > 0 {
				c.updateView(v)
			}
		}
		cancel()
		if asked++; asked == widePeers {
			return
		}
	}
}
