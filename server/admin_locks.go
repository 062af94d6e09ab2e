package server

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
	"github.com/paxlock/paxlock/server/adminhttp"
)

// An operator's admin reads of any namespace's locks (GET /locks, GET
// /locks/{ns}/{key}): each group is read on its master, this node for
// the groups it serves, the other masters through their admin endpoints
// for theirs.

// lockSource is one source's share of a page: the first locks after the
// cursor of some groups, in key order, and whether it may have more after
// its last one (its page was full, or cut short to fit a frame).
type lockSource struct {
	locks []adminapi.LockSummary
	more  bool
}

// ListLocks implements adminhttp.LockNode.
func (n adminNode) ListLocks(ctx context.Context, q adminhttp.LockQuery) (adminapi.LockPage, error) {
	groups := q.Groups
	if groups == nil {
		groups = make([]int, len(n.svc.Groups()))
		for g := range groups {
			groups[g] = g
		}
	}
	v := n.view.Load()
	local, remote := []int{}, map[uint32][]int{}
	seen := map[int]bool{}
	for _, g := range groups {
		if seen[g] {
			continue // a group named twice is read once
		}
		seen[g] = true
		switch {
		case g >= len(n.svc.Groups()):
			return adminapi.LockPage{}, fmt.Errorf("%w: group %d out of range", wire.ErrInvalid, g)
		case n.svc.Group(group.ID(g)).Serving():
			local = append(local, g)
		case q.Local || g >= len(v.Groups) || v.Groups[g].Master == 0 || n.adminAddr(v.Groups[g].Master) == "":
			return adminapi.LockPage{}, fmt.Errorf("%w: group %d has no master this node can ask", group.ErrNotMaster, g)
		default:
			m := v.Groups[g].Master
			remote[m] = append(remote[m], g)
		}
	}
	var (
		mu    sync.Mutex
		srcs  []lockSource
		first error
		wg    sync.WaitGroup
	)
	add := func(s lockSource, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
		srcs = append(srcs, s)
	}
	for _, g := range local {
		wg.Go(func() { add(n.localLocks(ctx, q, group.ID(g))) })
	}
	for m, gs := range remote {
		wg.Go(func() { add(n.peerLocks(ctx, q, m, gs)) })
	}
	wg.Wait()
	if first != nil {
		return adminapi.LockPage{}, first
	}
	return mergeLockSources(q, srcs), nil
}

// localLocks lists group g's share of q on this node, its master.
func (n adminNode) localLocks(ctx context.Context, q adminhttp.LockQuery, g group.ID) (lockSource, error) {
	ch := make(chan wire.Response, 1)
	n.svc.List(q.Namespace, g, q.Prefix, q.After, q.Limit, func(r wire.Response) { ch <- r })
	var resp wire.Response
	select {
	case resp = <-ch:
	case <-ctx.Done():
		return lockSource{}, fmt.Errorf("list group %d: %w", g, ctx.Err())
	}
	switch resp.Status {
	case wire.StatusSuccess:
	case wire.StatusNoMaster:
		return lockSource{}, fmt.Errorf("%w: group %d", group.ErrNotMaster, g)
	default:
		return lockSource{}, fmt.Errorf("list group %d: %s %s", g, resp.Status, resp.Msg)
	}
	s := lockSource{locks: make([]adminapi.LockSummary, len(resp.Locks)), more: resp.More || len(resp.Locks) >= q.Limit}
	for i, l := range resp.Locks {
		s.locks[i] = adminapi.LockSummary{Key: l.Key, Group: int(g), Kind: l.Kind.String(), Holder: l.Holder.String(), Token: l.Token,
			TTLLeftMs: int64(l.TTLLeftMs), Value: l.Value, Readers: l.Readers, Permits: l.Permits, Limit: l.Limit, Waiters: l.QueueLen}
	}
	return s, nil
}

// peerLocks asks node m's admin endpoint for groups gs' share of q (the
// groups m masters, local=1).
func (n adminNode) peerLocks(ctx context.Context, q adminhttp.LockQuery, m uint32, gs []int) (lockSource, error) {
	gstr := make([]string, len(gs))
	for i, g := range gs {
		gstr[i] = strconv.Itoa(g)
	}
	vals := url.Values{"namespace": {q.Namespace}, "prefix": {q.Prefix}, "after": {q.After},
		"limit": {strconv.Itoa(q.Limit)}, "groups": {strings.Join(gstr, ",")}, "local": {"1"}}
	var page adminapi.LockPage
	if err := n.peerGet(ctx, m, "/locks", vals, &page); err != nil {
		if errors.Is(err, errPeerUnanswered) {
			return lockSource{}, fmt.Errorf("%w: %w", group.ErrNotMaster, err)
		}
		return lockSource{}, err
	}
	return lockSource{locks: page.Locks, more: page.Next != ""}, nil
}

// mergeLockSources is q's page from every source's share: the first
// q.Limit keys in order, but none after the least last key of a source
// that may have more (keys beyond it may be missing), and the cursor of
// the next page when there may be one.
func mergeLockSources(q adminhttp.LockQuery, srcs []lockSource) adminapi.LockPage {
	var all []adminapi.LockSummary
	cut, hasCut := "", false
	for _, s := range srcs {
		all = append(all, s.locks...)
		if n := len(s.locks); s.more && n > 0 && (!hasCut || s.locks[n-1].Key < cut) {
			cut, hasCut = s.locks[n-1].Key, true
		}
	}
	slices.SortFunc(all, func(a, b adminapi.LockSummary) int { return strings.Compare(a.Key, b.Key) })
	full := false
	if hasCut {
		i, _ := slices.BinarySearchFunc(all, cut, func(l adminapi.LockSummary, k string) int { return strings.Compare(l.Key, k) })
		all, full = all[:i+1], true // all[i] is the cut key itself
	}
	page := adminapi.LockPage{Namespace: q.Namespace, Prefix: q.Prefix, Locks: all[:min(q.Limit, len(all))]}
	if page.Locks == nil {
		page.Locks = []adminapi.LockSummary{}
	}
	if len(page.Locks) > 0 && (full || len(all) > q.Limit) {
		page.Next = page.Locks[len(page.Locks)-1].Key
	}
	return page
}

// InspectKey implements adminhttp.LockNode.
func (n adminNode) InspectKey(ctx context.Context, ns, key string) (adminapi.LockDetail, error) {
	d, err := n.svc.InspectKey(ctx, ns, key)
	d.Master = n.cfg.NodeID
	return d, err
}
