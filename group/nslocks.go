package group

import (
	"maps"
	"strings"
)

// countNS adds d to the held keys of full key's namespace; sm.mu is held.
// A namespace's entry goes when its count reaches 0, so the map holds only
// namespaces with held keys (namespaces are created by operators, so the
// map stays small).
func (sm *StateMachine) countNS(key string, d int64) {
	ns, _ := splitFull(key)
	sm.quotaHeld(ns, d)
	n, ok := sm.nsHeld[ns]
	switch {
	case !ok && d > 0:
		if sm.nsHeld == nil {
			sm.nsHeld = make(map[string]int64)
		}
		sm.nsHeld[strings.Clone(ns)] = d // not a slice of the key, which it would keep
	case n+d <= 0:
		delete(sm.nsHeld, ns)
	default:
		sm.nsHeld[ns] = n + d
	}
}

// HeldByNamespace returns the number of held keys per namespace in this
// group's table (namespaces without one are absent).
func (sm *StateMachine) HeldByNamespace() map[string]int64 {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return maps.Clone(sm.nsHeld)
}
