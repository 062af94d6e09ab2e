package group

import (
	"strings"
)

// nsUse is what one group's table holds of a namespace: its held keys
// and their holders (a writer, each reader of a read lock, each holder of
// a semaphore's permits), which the held quota counts.
type nsUse struct {
	keys, holders int64
}

// countNS adds dKeys to the held keys and dHolders to the holders of full
// key's namespace; sm.mu is held. A namespace's entry goes when its keys
// reach 0, so the map holds only namespaces with held keys (namespaces
// are created by operators, so the map stays small).
func (sm *StateMachine) countNS(key string, dKeys, dHolders int64) {
	if dKeys == 0 && dHolders == 0 {
		return
	}
	ns, _ := splitFull(key)
	sm.quotaHeld(ns, dHolders)
	c, ok := sm.nsHeld[ns]
	c.keys += dKeys
	c.holders += dHolders
	switch {
	case !ok:
		if sm.nsHeld == nil {
			sm.nsHeld = make(map[string]nsUse)
		}
		sm.nsHeld[strings.Clone(ns)] = c // not a slice of the key, which it would keep
	case c.keys <= 0:
		delete(sm.nsHeld, ns)
	default:
		sm.nsHeld[ns] = c
	}
}

// HeldByNamespace returns the number of held keys per namespace in this
// group's table (namespaces without one are absent).
func (sm *StateMachine) HeldByNamespace() map[string]int64 {
	return sm.useByNamespace(func(u nsUse) int64 { return u.keys })
}

// HoldersByNamespace returns the number of holders per namespace in this
// group's table (what the held quota counts; namespaces without a held
// key are absent).
func (sm *StateMachine) HoldersByNamespace() map[string]int64 {
	return sm.useByNamespace(func(u nsUse) int64 { return u.holders })
}

// useByNamespace returns one count of each namespace's use of this
// group's table, read under sm.mu.
func (sm *StateMachine) useByNamespace(count func(nsUse) int64) map[string]int64 {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	out := make(map[string]int64, len(sm.nsHeld))
	for ns, c := range sm.nsHeld {
		out[ns] = count(c)
	}
	return out
}
