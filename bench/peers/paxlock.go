package peers

// The paxlock adapter. paxlock's Go client (package
// github.com/paxlock/paxlock/client) does not exist yet, so this file is a
// placeholder: OpenPaxlock returns an error wrapping load.ErrNotBuilt, and
// the suite skips paxlock and says so in the report. Everything else in
// bench/ is ready for it: the go.mod already replaces the core module with
// the enclosing repository.
//
// To fill it in, once the client exists (keep this the only file that
// imports the client):
//
//  1. `cd bench && go get github.com/paxlock/paxlock@v0.0.0` (the replace
//     directive makes that the working tree) and import
//     "github.com/paxlock/paxlock/client".
//  2. OpenPaxlock: client.New(ctx, client.Config{Registry: cfg.PaxlockRegistry,
//     Namespace: cfg.PaxlockNamespace, Secret: cfg.PaxlockSecret}); check it
//     answers (e.g. a State call on a throw-away key); keep ONE client for
//     all workers — it multiplexes requests over its connections, which is
//     how applications are meant to use it.
//  3. NewSession: a small struct holding that client (no per-worker
//     connection, unlike the etcd and ZooKeeper sessions).
//  4. Acquire: Exclusive → c.Mutex(req.Key, client.TTL(req.TTL)), then
//     m.Lock(ctx) — it waits server-side and is woken by the server's push,
//     bounded by ctx's deadline. Read/Write → c.RWMutex(...).RLock/Lock.
//     Lease.Token = the fencing token (m.Token()); Lease.Handle = m. No
//     auto-renew: the harness renews explicitly in the renew scenario.
//  5. Renew: the handle's renew call with ttl. Release: m.Unlock(ctx).
//     Map the client's sentinel errors: LOCK_CHANGED_OWNER / TOKEN_ERROR →
//     load.ErrNotHeld; TIMEOUT → context.DeadlineExceeded; OVERLOADED and
//     no-master / connection errors → load.ErrUnavailable.
//  6. Caps: Renew, ReadWrite and Fencing true; Wait "server push".
//     Version: the server's version from the cluster view or status call.
//
// `make bench` then includes paxlock automatically (it is in the default
// -systems list), and the report grows its paxlock / peer ratio columns.

import (
	"context"
	"fmt"

	"github.com/paxlock/paxlock/bench/load"
)

// OpenPaxlock connects to a paxlock cluster through cfg.PaxlockRegistry.
// Until paxlock's client exists it returns an error wrapping
// load.ErrNotBuilt.
func OpenPaxlock(_ context.Context, cfg Config) (load.Locker, error) {
	return nil, fmt.Errorf("paxlock (registry %v): %w: the Go client (package client) does not exist yet; "+
		"fill in bench/peers/paxlock.go when it does", cfg.PaxlockRegistry, load.ErrNotBuilt)
}
