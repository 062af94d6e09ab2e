package group

import (
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// TestSystemTablesClaimTheirKeys: Load's multiplexer offers a key to the
// lock table and each system table, so each table's keys are claimed by
// it alone, and a key none knows (a newer state machine's) by none.
func TestSystemTablesClaimTheirKeys(t *testing.T) {
	t.Parallel()
	tables := NewStateMachine(1).systemTables()
	for _, c := range []struct {
		key   string
		owner int // index into tables; -1: the lock table's; -2: none's (a newer state machine's)
	}{
		{"ntenant", 0}, {"mnsinit", 0}, {"qtenant", 1}, {"c\x00\x00\x00\x01", 2}, {"mmeminit", 2},
		{"rcname", 3}, {"rv", 3}, {"l" + fullKey("ns", "k"), -1}, {"d" + fullKey("ns", "k"), -1},
		{"k" + fullKey("ns", "k"), -1}, {"vns", -1}, {string(versionKey), -1}, {"mnewer", -2}, {"znewer", -2},
		{"a\x00\x00\x00\x00\x00\x00\x00\x01", 4},
	} {
		claimed := -2
		if (&lockLoad{}).claims([]byte(c.key)) {
			claimed = -1
		}
		for i, tab := range tables {
			if tab.Claims([]byte(c.key)) {
				if claimed != -2 {
					t.Fatalf("%q claimed by tables %d and %d", c.key, claimed, i)
				}
				claimed = i
			}
		}
		if claimed != c.owner {
			t.Errorf("%q claimed by %d, want %d", c.key, claimed, c.owner)
		}
	}
}

// TestApplyLockCommandAllocs: a lock-table command pays only for its
// decoded key through the table-driven dispatch (a command that escaped
// to the heap in applyCommand would cost each one more allocation).
func TestApplyLockCommandAllocs(t *testing.T) {
	sm := NewStateMachine(1)
	key := fullKey("ns", "k")
	o := wire.Owner{Client: 1, ID: 1}
	res := make([]any, 1)
	sm.Apply(1, [][]byte{appendCommand(nil, &command{op: opAcquire, key: key, owner: o, kind: wire.KindExclusive, ttlMs: 1000})}, nopWriter{}, res)
	renew := [][]byte{appendCommand(nil, &command{op: opRenew, key: key, owner: o, token: 1, ttlMs: 1000})}
	n := testing.AllocsPerRun(1000, func() { sm.Apply(2, renew, nopWriter{}, res) })
	if st := res[0].(*outcome).status; st != wire.StatusSuccess {
		t.Fatalf("renew: %v", st)
	}
	if n >= 1.5 {
		t.Fatalf("a renew's apply costs %.2f allocations, want its key's one", n)
	}
}
