package group

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/paxlock/paxlock/adminapi"
)

// HotKey is a key with waiters on a group this node serves, for the
// operators' console (adminapi.HotKey).
type HotKey = adminapi.HotKey

// HolderInfo is one hold of a HotKey (adminapi.HolderInfo).
type HolderInfo = adminapi.HolderInfo

// maxHotHolders bounds the holders listed per hot key (readers may be
// many).
const maxHotHolders = 8

// HotKeys returns up to n keys with the most waiters over the groups this
// node serves, most waited-for first (ties: group, then namespace, then
// key). Each worker of each serving group lists its own top n when it next
// runs, between requests; nothing is counted on the request path. It
// returns what it has with ctx's error if ctx ends first.
func (s *Service) HotKeys(ctx context.Context, n int) ([]HotKey, error) {
	if n <= 0 {
		return nil, nil
	}
	var posted int
	ch := make(chan []HotKey, len(s.groups)*s.cfg.Workers)
	for _, g := range s.groups {
		if !g.Serving() {
			continue
		}
		for _, w := range g.workers {
			posted++
			w.post(event{kind: evInspect, inspect: func(hk []HotKey) { ch <- hk }, n: n})
		}
	}
	var all []HotKey
	for range posted {
		select {
		case hk := <-ch:
			all = append(all, hk...)
		case <-ctx.Done():
			SortHotKeys(all)
			return all[:min(n, len(all))], fmt.Errorf("group: hot keys: %w", ctx.Err())
		}
	}
	SortHotKeys(all)
	return all[:min(n, len(all))], nil
}

// SortHotKeys sorts hk most waiters first (ties: group, namespace, key),
// the order HotKeys returns; it merges the lists of several nodes.
func SortHotKeys(hk []HotKey) {
	slices.SortFunc(hk, func(a, b HotKey) int {
		return cmp.Or(cmp.Compare(b.Waiters, a.Waiters), cmp.Compare(a.Group, b.Group),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Key, b.Key))
	})
}

// hotKeys lists the worker's n keys with the most live waiters. It runs
// on the worker's goroutine (evInspect).
func (w *worker) hotKeys(n int) []HotKey {
	if !w.serving {
		return nil
	}
	var out []HotKey
	for key, ks := range w.keys {
		waiting := 0
		for _, q := range ks.waiters {
			if !q.gone {
				waiting++
			}
		}
		if waiting == 0 {
			continue
		}
		ns, k := splitFull(key)
		out = append(out, HotKey{Group: int(w.g.id), Namespace: ns, Key: k, Waiters: waiting, Watchers: len(ks.watchers)})
	}
	SortHotKeys(out)
	out = out[:min(n, len(out))]
	now := w.clock.Now()
	for i := range out {
		key := fullKey(out[i].Namespace, out[i].Key)
		w.g.sm.view(key, func(rec *lockRec) {
			for j := range min(rec.n(), maxHotHolders) {
				h := rec.at(j)
				left := int64(w.ttlLeft(key, rec, j, now))
				out[i].Holders = append(out[i].Holders, HolderInfo{Owner: h.owner.String(), Kind: rec.kind().String(), Token: h.token, TTLLeftMs: left})
			}
		})
	}
	return out
}
