// This file is the non-reentrant lock on the command line: lock
// -nonreentrant KEY refuses at once, instead of waiting for itself
// forever, when an enclosing run form already holds KEY; and
// PAXLOCK_HELD, through which every run form tells its command what it
// holds, so that such a lock can tell.

package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/recipe"
)

// envHeld lists what the run forms enclosing a command hold: one entry
// NAMESPACE/KEY per key (the key query-escaped, so an entry holds no
// space), separated by spaces, the outermost first. Each run form passes
// on the list it found, with its own keys added.
const envHeld = "PAXLOCK_HELD"

// heldEntry is key's entry in PAXLOCK_HELD.
func heldEntry(ns, key string) string { return ns + "/" + url.QueryEscape(key) }

// heldByEnclosing reports whether an enclosing run form holds key of
// namespace ns, by PAXLOCK_HELD.
func heldByEnclosing(ns, key string) bool {
	return slices.Contains(strings.Fields(os.Getenv(envHeld)), heldEntry(ns, key))
}

// heldEnv is the PAXLOCK_HELD a run form's command gets: the one
// paxlockctl found, with the hold's keys (e's Key or Keys) added.
func heldEnv(ns string, e holdEvent) string {
	list := strings.Fields(os.Getenv(envHeld))
	keys := e.Keys
	if len(keys) == 0 && e.Key != "" {
		keys = []string{e.Key}
	}
	for _, k := range keys {
		if ent := heldEntry(ns, k); !slices.Contains(list, ent) {
			list = append(list, ent)
		}
	}
	return envHeld + "=" + strings.Join(list, " ")
}

// checkReentry fails with a *recipe.ReentrantError (wrapping
// recipe.ErrReentrant) when lock -nonreentrant is asked for a key an
// enclosing run form holds: that lock would wait for its own holder.
func checkReentry(o *options, key string) error {
	if o.nonreentrant && heldByEnclosing(o.ns, key) {
		return &recipe.ReentrantError{Key: key}
	}
	return nil
}

// checkRecipeHold checks -nonreentrant (lock's), -upgradable (rlock's
// and wlock's, which always wait) and, for lock -nonreentrant, that no enclosing run
// form holds the key.
func checkRecipeHold(o *options, name string, args []string) error {
	switch {
	case o.nonreentrant && name != "lock":
		return fmt.Errorf("%w: -nonreentrant is lock's", errUsage)
	case o.upgradable && name != "rlock" && name != "wlock":
		return fmt.Errorf("%w: -upgradable is rlock's and wlock's", errUsage)
	case o.upgradable && o.waitGiven && o.wait == 0:
		return fmt.Errorf("%w: %s -upgradable waits: give -wait a positive bound, or none", errUsage, name)
	case o.nonreentrant:
		return checkReentry(o, args[0])
	}
	return nil
}

// nonreentrantHold is lock -nonreentrant's hold: client/recipe's
// non-reentrant Mutex.
type nonreentrantHold struct{ m *recipe.Mutex }

func (h nonreentrantHold) take(ctx context.Context, block bool) error {
	if block {
		return h.m.Lock(ctx)
	}
	return h.m.TryLock(ctx)
}

func (h nonreentrantHold) held() bool                        { return h.m.Client().Held() }
func (h nonreentrantHold) lost() <-chan struct{}             { return h.m.Client().Lost() }
func (h nonreentrantHold) release(ctx context.Context) error { return h.m.Unlock(ctx) }
func (h nonreentrantHold) describe(e *holdEvent)             { mutexHold{h.m.Client()}.describe(e) }
func (h nonreentrantHold) env() []string                     { return mutexHold{h.m.Client()}.env() }

// recipeHolder is the hold of lock -nonreentrant, rlock -upgradable and
// wlock -upgradable,
// nil for every other run form.
func recipeHolder(c *client.Client, o *options, name, key string, opts []client.Option) holder {
	switch {
	case name == "lock" && o.nonreentrant:
		return nonreentrantHold{recipe.NewMutex(c, key, opts...)}
	case (name == "rlock" || name == "wlock") && o.upgradable:
		return newUpgradeHold(c, key, name == "wlock", opts)
	}
	return nil
}
