package group

import "testing"

// TestSystemTablesClaimTheirKeys: Load's multiplexer offers a key to each
// system table, so each of the tables' keys is claimed by exactly one,
// and the lock table's own keys by none.
func TestSystemTablesClaimTheirKeys(t *testing.T) {
	t.Parallel()
	tables := NewStateMachine(1).systemTables()
	for _, c := range []struct {
		key   string
		owner int // index into tables, -1: the lock table's
	}{
		{"ntenant", 0}, {"mnsinit", 0}, {"qtenant", 1}, {"c\x00\x00\x00\x01", 2}, {"mmeminit", 2},
		{"rcname", 3}, {"rv", 3}, {"l" + fullKey("ns", "k"), -1}, {"d" + fullKey("ns", "k"), -1},
		{"k" + fullKey("ns", "k"), -1}, {"vns", -1}, {string(versionKey), -1},
	} {
		claimed := -1
		for i, tab := range tables {
			if tab.Claims([]byte(c.key)) {
				if claimed >= 0 {
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
