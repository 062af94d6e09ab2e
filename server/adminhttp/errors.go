package adminhttp

import "errors"

// The classes of a Node's errors, by what the handlers answer: a Node
// wraps each error it returns in its class (as well as wire.ErrInvalid
// for bad input, which needs no class), so the endpoint maps errors to
// HTTP statuses without knowing the lock service's own sentinels. The
// wrapped error's text is what the operator reads.
var (
	// ErrNotMaster: this node does not master the key's lock group
	// (redirect to its master, else 503).
	ErrNotMaster = errors.New("not the key's master")
	// ErrNotSystemMaster: this node does not master lock group 0, whose
	// tables the request changes (redirect to its master, else 503).
	ErrNotSystemMaster = errors.New("not lock group 0's master")
	// ErrNotFound: the namespace, cluster or move named is unknown (404).
	ErrNotFound = errors.New("not found")
	// ErrConflict: the tables' rules or limits refuse the change, or it
	// belongs to another cluster (409).
	ErrConflict = errors.New("conflict")
	// ErrBadInput: the request itself is wrong beyond what
	// wire.ErrInvalid says: a move's batch, a token range, a membership
	// change (400).
	ErrBadInput = errors.New("bad input")
	// ErrRetryLater: the change cannot be made now and can be later, as
	// when the key's namespace is moving (503 with Retry-After).
	ErrRetryLater = errors.New("retry later")
)
