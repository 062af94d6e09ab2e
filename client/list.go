package client

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// ListPage is one page of List.
type ListPage struct {
	// Locks are the page's held locks, in key order, each as State
	// reports it (Held is true; Holder is a read lock's first reader).
	Locks []State
	// Next is the after of the next page, "" when this one is the last.
	Next string
}

// List returns held locks of the client's namespace whose keys start with
// prefix and sort after after (byte order; "" for the first page), at
// most limit of them (1..wire.MaxListLimit; 0 for wire.DefaultListLimit),
// in key order, with their holders, tokens, TTL left and waiters. Every
// group's master is asked at once and the answers merged; pass the page's
// Next as after for the next page. A page is a snapshot of each group at
// a slightly different moment, not of the namespace at one instant.
//
// Listing scans the held keys of every group on its master: it is for
// operators and dashboards, not for a request path.
func (c *Client) List(ctx context.Context, prefix, after string, limit int) (ListPage, error) {
	if c == nil {
		return ListPage{}, invalid("nil *Client")
	}
	if len(prefix) > wire.MaxKeyLen || len(after) > wire.MaxKeyLen {
		return ListPage{}, invalid("list: prefix or after longer than %d bytes", wire.MaxKeyLen)
	}
	switch {
	case limit == 0:
		limit = wire.DefaultListLimit
	case limit < 0 || limit > wire.MaxListLimit:
		return ListPage{}, invalid("list: limit %d not in 1..%d", limit, wire.MaxListLimit)
	}
	groups := wire.DefaultGroups
	if v := c.View(); v != nil && len(v.Groups) > 0 {
		groups = len(v.Groups)
	}
	var (
		mu   sync.Mutex
		all  []State
		full bool // some group may have more
		// cut is the least last key of the groups whose answer stopped
		// short to fit a frame (Response.More): keys after it may be
		// missing from this page, so it ends there.
		cut    string
		hasCut bool
		first  error
		wg     sync.WaitGroup
	)
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The group's own number is a hash that routes to it
			// (wire.GroupOf is the hash modulo the group count).
			res, err := c.do(ctx, "list", prefix, uint64(g), wire.TypeList,
				&wire.List{Group: uint32(g), Prefix: prefix, After: after, Limit: uint32(limit)})
			if err == nil && res.resp.Status != wire.StatusSuccess {
				err = statusErr("list", prefix, res.resp)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			full = full || len(res.resp.Locks) >= limit
			if n := len(res.resp.Locks); res.resp.More && n > 0 {
				if last := res.resp.Locks[n-1].Key; !hasCut || last < cut {
					cut, hasCut = last, true
				}
			}
			for _, l := range res.resp.Locks {
				all = append(all, State{Key: l.Key, Held: true, Holder: l.Holder, Token: l.Token, Kind: l.Kind, Readers: int(l.Readers),
					TTLLeft: time.Duration(l.TTLLeftMs) * time.Millisecond, QueueLen: int(l.QueueLen), Value: l.Value,
					Permits: int(l.Limit), InUse: int(l.Permits)})
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return ListPage{}, first
	}
	slices.SortFunc(all, func(a, b State) int { return strings.Compare(a.Key, b.Key) })
	if hasCut {
		n, _ := slices.BinarySearchFunc(all, cut, func(s State, k string) int { return strings.Compare(s.Key, k) })
		all, full = all[:n+1], true // all[n] is the cut key itself
	}
	page := ListPage{Locks: all[:min(limit, len(all))]}
	if full || len(all) > limit {
		page.Next = page.Locks[len(page.Locks)-1].Key
	}
	return page, nil
}
