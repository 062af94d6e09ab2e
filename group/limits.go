package group

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/paxlock/paxlock/client/wire"
)

// The defaults of Config's per-connection and per-namespace bounds.
const (
	DefaultMaxConnWaits        = 10000
	DefaultMaxConnWatches      = 10000
	DefaultMaxNamespaceWaits   = 100000
	DefaultMaxNamespaceWatches = 100000
)

// The defaults of Config's bounds on prefix watches. A client's prefix
// watch takes a place in every group whose master it registers with, so
// a connection to a node that masters all of a cluster's 15 groups
// (wire.DefaultGroups) keeps 4 prefix watches in 64 places. Each change
// of a key costs its master a prefix test per prefix watch of its
// namespace on its group: at most DefaultMaxNamespacePrefixWatches.
const (
	DefaultMaxConnPrefixWatches      = 64
	DefaultMaxNamespacePrefixWatches = 256
)

// DefaultMaxHoldersPerKey is Config.MaxHoldersPerKey's default: a read
// lock's readers or a semaphore's holders beyond it are refused
// OVERLOADED, so that one key's record (copied into every State answer
// and every snapshot) stays bounded.
const DefaultMaxHoldersPerKey = 1024

// DefaultMaxWaited is Config.MaxWaited's default. A re-sent wait ranks as
// if it had arrived Request.WaitedMs earlier; a claim beyond the bound
// counts as the bound, so a client cannot jump a key's queue by more than
// it, whatever it sends (a wait re-sent after a failover has waited
// seconds, one after a namespace move minutes at most).
const DefaultMaxWaited = 10 * time.Minute

// EnsureDefaults fills every unset field with its default; NewService
// calls it.
func (c *Config) EnsureDefaults() {
	if c.Groups <= 0 {
		c.Groups = wire.DefaultGroups
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.DefaultTTL <= 0 {
		c.DefaultTTL = DefaultTTL
	}
	if c.MinTTL <= 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = DefaultMaxTTL
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = DefaultMaxWaiters
	}
	if c.MaxHoldersPerKey <= 0 {
		c.MaxHoldersPerKey = DefaultMaxHoldersPerKey
	}
	if c.MaxWaited <= 0 {
		c.MaxWaited = DefaultMaxWaited
	}
	if c.MaxConnWaits <= 0 {
		c.MaxConnWaits = DefaultMaxConnWaits
	}
	if c.MaxConnWatches <= 0 {
		c.MaxConnWatches = DefaultMaxConnWatches
	}
	if c.MaxNamespaceWaits <= 0 {
		c.MaxNamespaceWaits = DefaultMaxNamespaceWaits
	}
	if c.MaxNamespaceWatches <= 0 {
		c.MaxNamespaceWatches = DefaultMaxNamespaceWatches
	}
	if c.MaxConnPrefixWatches <= 0 {
		c.MaxConnPrefixWatches = DefaultMaxConnPrefixWatches
	}
	if c.MaxNamespacePrefixWatches <= 0 {
		c.MaxNamespacePrefixWatches = DefaultMaxNamespacePrefixWatches
	}
	if c.WeightAging <= 0 {
		c.WeightAging = DefaultWeightAging
	}
	if c.Clock == nil {
		c.Clock = RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// overloadRetryMs is the RetryAfterMs of a wait or watch refused by a
// bound: room comes back as waits end and watches fire.
const overloadRetryMs = 100

// useKind is what a usage counts.
type useKind uint8

const (
	useWait   useKind = iota // a blocked acquire in a key's queue
	useWatch                 // a watch in a key's watchers
	usePrefix                // a prefix watch registered with a group (prefixwatch.go)
)

// useCount is one connection's or one namespace's waits, watches and
// prefix watches.
type useCount [3]int

// usage counts, per connection (Sink) and per namespace, the blocked
// acquires and watches this node's masters keep, across groups and
// workers, so that no client can grow a master's memory without limit
// (Config.MaxConnWaits and the like). A worker takes a place before it
// queues a wait or sets a watch (take, which refuses beyond a bound),
// and gives it back when the wait or watch leaves its by-connection
// index (worker.unindex, worker.unindexWatch, worker.giveUsage). Entries
// at zero are deleted, so a closed connection leaves nothing behind.
type usage struct {
	mu    sync.Mutex
	conns map[Sink]*useCount
	nss   map[string]*useCount
}

// take counts one k for sink in namespace ns. With bounded, it refuses
// (counting nothing) when sink or ns already has its bound of k, or ns
// its quota (this node's share of the namespace's quota of k; 0: none),
// and says which bound in the returned message, with byQuota when it was
// the quota; without, it always counts (a wait moving to a new
// connection).
func (u *usage) take(cfg *Config, k useKind, sink Sink, ns string, bounded bool, quota int64) (msg string, byQuota bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	c, n := u.conns[sink], u.nss[ns]
	if bounded {
		maxConn, maxNS, what := cfg.MaxConnWaits, cfg.MaxNamespaceWaits, "blocked acquires"
		switch k {
		case useWatch:
			maxConn, maxNS, what = cfg.MaxConnWatches, cfg.MaxNamespaceWatches, "watches"
		case usePrefix:
			maxConn, maxNS, what = cfg.MaxConnPrefixWatches, cfg.MaxNamespacePrefixWatches, "prefix watches"
		}
		switch {
		case c != nil && c[k] >= maxConn:
			return fmt.Sprintf("too many %s on this connection (%d)", what, maxConn), false
		case n != nil && n[k] >= maxNS:
			return fmt.Sprintf("too many %s in this namespace on this node (%d)", what, maxNS), false
		case quota > 0 && n != nil && int64(n[k]) >= quota:
			return msgQuotaWaiters, true
		}
	}
	if c == nil {
		if u.conns == nil {
			u.conns = make(map[Sink]*useCount)
		}
		c = new(useCount)
		u.conns[sink] = c
	}
	if n == nil {
		if u.nss == nil {
			u.nss = make(map[string]*useCount)
		}
		n = new(useCount)
		u.nss[ns] = n
	}
	c[k]++
	n[k]++
	return "", false
}

// conn returns sink's counts.
func (u *usage) conn(sink Sink) useCount {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.conns[sink]; c != nil {
		return *c
	}
	return useCount{}
}

// ConnUsage is what one connection (Sink) keeps at this node's masters:
// its blocked acquires, watches and prefix watches.
type ConnUsage struct {
	Waits, Watches, PrefixWatches int
}

// ConnUsage returns sink's blocked acquires and watches at this node's
// masters, as the per-connection bounds count them.
func (s *Service) ConnUsage(sink Sink) ConnUsage {
	c := s.use.conn(sink)
	return ConnUsage{Waits: c[useWait], Watches: c[useWatch], PrefixWatches: c[usePrefix]}
}

// namespace returns namespace ns's counts.
func (u *usage) namespace(ns string) useCount {
	u.mu.Lock()
	defer u.mu.Unlock()
	if n := u.nss[ns]; n != nil {
		return *n
	}
	return useCount{}
}

// give uncounts one k of sink in namespace ns.
func (u *usage) give(k useKind, sink Sink, ns string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.conns[sink]; c != nil {
		if c[k]--; *c == (useCount{}) {
			delete(u.conns, sink)
		}
	}
	if n := u.nss[ns]; n != nil {
		if n[k]--; *n == (useCount{}) {
			delete(u.nss, ns)
		}
	}
}

// admit takes a place of kind k for r, a blocked acquire about to be
// queued or a watch about to be set; beyond a bound it answers r
// OVERLOADED with RetryAfterMs and reports false.
func (w *worker) admit(k useKind, r *Request) bool {
	var quota int64
	if k == useWait {
		quota = w.adm.waitersQuota(r.Namespace)
	}
	msg, byQuota := w.use.take(w.cfg, k, r.Sink, r.Namespace, true, quota)
	if msg == "" {
		return true
	}
	if byQuota {
		w.adm.refusedWaiter(r.Namespace)
	}
	w.respond(r, wire.Response{Status: wire.StatusOverloaded, RetryAfterMs: overloadRetryMs, Msg: msg})
	return false
}

// giveUsage gives back the places of every wait and watch indexed by the
// worker, which is about to drop them all (loseMastership).
func (w *worker) giveUsage() {
	u := w.use
	for _, m := range w.waits {
		for q := range m {
			u.give(useWait, q.req.Sink, q.req.Namespace)
		}
	}
	for _, m := range w.watching {
		for wt := range m {
			ns, _ := splitFull(wt.key)
			u.give(useWatch, wt.sink, ns)
		}
	}
}
