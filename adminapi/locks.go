package adminapi

// The bodies of the admin lock reads, GET /locks and GET
// /locks/{namespace}/{key}: what an operator holding the admin token sees
// of any namespace's locks, without its secret.

// ListLimit is GET /locks' default page size, MaxListLimit its largest
// (?limit=).
const (
	ListLimit    = 100
	MaxListLimit = 1000
)

// LockPage is GET /locks?namespace=&prefix=&after=&limit=: held locks of
// a namespace whose keys start with Prefix, in key order, after the
// cursor After. Next is the after of the next page, "" when this is the
// last. Each group is read on its master at a slightly different moment.
type LockPage struct {
	Namespace string        `json:"namespace"`
	Prefix    string        `json:"prefix"`
	Locks     []LockSummary `json:"locks"`
	Next      string        `json:"next,omitempty"`
}

// LockSummary is one held lock of a LockPage, as its group's master
// reports it: the first holder (a read lock's first reader), how many
// hold it and how many wait.
type LockSummary struct {
	Key   string `json:"key"`
	Group int    `json:"group"`
	// Kind is write, read or semaphore.
	Kind      string `json:"kind"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	TTLLeftMs int64  `json:"ttl_left_ms"`
	Value     string `json:"value,omitempty"`
	// Readers counts a read lock's readers or a semaphore's holders;
	// Permits and Limit are a semaphore's permits in use and total.
	Readers uint32 `json:"readers,omitempty"`
	Permits uint32 `json:"permits,omitempty"`
	Limit   uint32 `json:"limit,omitempty"`
	Waiters uint32 `json:"waiters"`
}

// LockDetail is GET /locks/{namespace}/{key}: everything the key's master
// knows of it. A free key has no holders (Held false), and may still be in
// a lock-delay or have waiters.
type LockDetail struct {
	Namespace string `json:"namespace"`
	Key       string `json:"key"`
	Group     int    `json:"group"`
	// Master is the node that answered, the key's group's master.
	Master uint32 `json:"master"`
	Held   bool   `json:"held"`
	// Kind is write, read or semaphore when held, "" when free.
	Kind string `json:"kind,omitempty"`
	// Limit is a semaphore's total of permits.
	Limit   uint32       `json:"limit,omitempty"`
	Holders []LockHolder `json:"holders"`
	// DelayLeftMs is what is left of a lock-delay that keeps the key
	// from anyone (0: none).
	DelayLeftMs int64 `json:"delay_left_ms"`
	// Waiters is the key's queue in the order it is served (weight, then
	// arrival: see the client's Weight option); Watchers counts watches.
	Waiters  []LockWaiter `json:"waiters"`
	Watchers int          `json:"watchers"`
	// More says the holders or waiters were cut at MaxDetailEntries.
	More bool `json:"more,omitempty"`
}

// MaxDetailEntries bounds the holders and the waiters a LockDetail lists.
const MaxDetailEntries = 1000

// LockHolder is one hold of a LockDetail.
type LockHolder struct {
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
	Value string `json:"value,omitempty"`
	// TTLLeftMs is the hold's validity left as the master measures it (0
	// for a revoked hold: it ends when its holder acknowledges).
	TTLLeftMs int64 `json:"ttl_left_ms"`
	// HeldMs is how long the hold has been held, as the master's clock
	// measures it from the grant it knows of (after a master change, at
	// least as long as this). 0: not known.
	HeldMs int64 `json:"held_ms,omitempty"`
	// LockDelayMs is the lock-delay the key gets if this hold is lost.
	LockDelayMs int64 `json:"lock_delay_ms,omitempty"`
	// Permits are a semaphore hold's permits.
	Permits uint32 `json:"permits,omitempty"`
	// Revoked: an operator force-unlocked it and the master waits for the
	// holder's acknowledgement or its deadline.
	Revoked bool `json:"revoked,omitempty"`
}

// LockWaiter is one blocked acquire in a LockDetail's queue.
type LockWaiter struct {
	Owner string `json:"owner"`
	// Kind is what it waits for: write, read or semaphore.
	Kind string `json:"kind"`
	// Weight is its priority (1 to 10); Permits a semaphore wait's.
	Weight  int    `json:"weight"`
	Permits uint32 `json:"permits,omitempty"`
	// WaitedMs is how long it has waited, counting what it waited at an
	// earlier master before a master change.
	WaitedMs int64 `json:"waited_ms"`
	// Granting: its grant is being proposed.
	Granting bool `json:"granting,omitempty"`
}
