package group

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/paxlock/paxlock/adminapi"
	"github.com/paxlock/paxlock/client/wire"
)

// InspectKey returns what this node, as the master of key's group, knows
// of key in namespace ns: every holder with its value, token, validity
// left and lock-delay, the lock-delay in force, and the waiter queue in
// the order it is served, with weights and time waited (for an
// operator's admin read: GET /locks/{ns}/{key}). It is ErrNotMaster when
// this node does not serve the group. The key's worker answers when it
// next runs, between requests; nothing is counted on the request path.
func (s *Service) InspectKey(ctx context.Context, ns, key string) (adminapi.LockDetail, error) {
	if err := wire.ValidateKey(key); err != nil {
		return adminapi.LockDetail{}, err
	}
	hash := wire.KeyHash(ns, key)
	gi := wire.GroupOf(hash, len(s.groups))
	g := s.groups[gi]
	if !g.Serving() {
		return adminapi.LockDetail{}, ErrNotMaster
	}
	ch := make(chan *adminapi.LockDetail, 1)
	q := &keyQuery{ns: ns, key: key, done: func(d *adminapi.LockDetail) { ch <- d }}
	g.workers[wire.WorkerOf(hash, len(g.workers))].post(event{kind: evKeyRead, keyq: q})
	select {
	case d := <-ch:
		if d == nil {
			return adminapi.LockDetail{}, ErrNotMaster
		}
		d.Group = gi
		return *d, nil
	case <-ctx.Done():
		return adminapi.LockDetail{}, fmt.Errorf("group: inspect %q: %w", key, ctx.Err())
	}
}

// keyQuery is one InspectKey asked of a key's worker; done is called once,
// with nil when the worker does not serve the group.
type keyQuery struct {
	ns, key string
	done    func(*adminapi.LockDetail)
}

// inspectKey is a worker's answer to q (evKeyRead), nil when it does
// not serve its group.
func (w *worker) inspectKey(q *keyQuery) *adminapi.LockDetail {
	if !w.serving || !w.g.leaseValid() {
		return nil
	}
	key := fullKey(q.ns, q.key)
	now := w.clock.Now()
	d := &adminapi.LockDetail{Namespace: q.ns, Key: q.key, Holders: []adminapi.LockHolder{}, Waiters: []adminapi.LockWaiter{}}
	w.g.sm.view(key, func(rec *lockRec) {
		if rec.n() == 0 {
			return
		}
		d.Held, d.Kind = true, rec.kind().String()
		if isSem(rec) {
			d.Limit = rec.limit()
		}
		for i := range rec.n() {
			if i == adminapi.MaxDetailEntries {
				d.More = true
				break
			}
			h := rec.at(i)
			lh := adminapi.LockHolder{Owner: h.owner.String(), Token: h.token, Value: rec.value(i),
				TTLLeftMs: int64(w.ttlLeft(key, rec, i, now)), LockDelayMs: int64(rec.delayAt(i)), Permits: rec.permitsAt(i)}
			if at, ok := w.grantedAt(key, h.owner, h.token); ok {
				lh.HeldMs = max(w.mono(now)-at, 0) / int64(time.Millisecond)
			}
			if w.isRevoked(key, h.owner, h.token) {
				lh.Revoked, lh.TTLLeftMs = true, 0
			}
			d.Holders = append(d.Holders, lh)
		}
	})
	var resp wire.Response
	w.delayInfo(&resp, key)
	d.DelayLeftMs = int64(resp.RetryAfterMs)
	if ks := w.keys[key]; ks != nil {
		d.Watchers = len(ks.watchers)
		d.Waiters = w.queueOf(ks, now)
		if len(d.Waiters) > adminapi.MaxDetailEntries {
			d.Waiters, d.More = d.Waiters[:adminapi.MaxDetailEntries], true
		}
	}
	return d
}

// queueOf lists ks's live waiters in the order they are served (rank, then
// arrival), each with the time it waited: its rank is its arrival minus
// what it waited elsewhere and its weight's credit (rankOf), so the time
// waited is now less the rank, less that credit.
func (w *worker) queueOf(ks *keyState, now time.Time) []adminapi.LockWaiter {
	live := make([]*waiter, 0, len(ks.waiters))
	for _, q := range ks.waiters {
		if !q.gone {
			live = append(live, q)
		}
	}
	slices.SortFunc(live, func(a, b *waiter) int { return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.seq, b.seq)) })
	out := make([]adminapi.LockWaiter, 0, len(live))
	for _, q := range live {
		wt := int(q.req.Weight)
		if wt == 0 {
			wt = wire.DefaultWeight
		}
		waited := w.mono(now) - q.rank - int64(wt)*int64(w.cfg.WeightAging)
		out = append(out, adminapi.LockWaiter{Owner: q.req.Owner.String(), Kind: q.req.Kind.String(), Weight: wt,
			Permits: q.req.Permits, WaitedMs: max(waited, 0) / int64(time.Millisecond), Granting: q.granting})
	}
	return out
}
