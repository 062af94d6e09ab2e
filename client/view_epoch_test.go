package client

import (
	"testing"

	"github.com/paxlock/paxlock/client/wire"
)

// TestViewEpochOrder: a registry's view of a new assignment (higher
// epoch) is newer whatever its cluster's own version; a node's bare
// version counts with the current epoch, so a client that failed over to
// the nodes keeps following the cluster; an older epoch is never newer.
func TestViewEpochOrder(t *testing.T) {
	t.Parallel()
	reg := func(epoch, v uint64) uint64 { return wire.RegistryViewVersion(epoch, v) }
	cases := []struct {
		name    string
		cur, v  uint64
		isNewer bool
	}{
		{"plain versions", 5, 6, true},
		{"plain older", 6, 5, false},
		{"new assignment, lower cluster version", reg(1, 900), reg(2, 3), true},
		{"older assignment", reg(2, 3), reg(1, 900), false},
		{"node of the same cluster, newer", reg(2, 3), 4, true},
		{"node of the same cluster, same", reg(2, 3), 3, false},
		{"registry after a node", reg(2, 4), reg(2, 5), true},
		{"epoch 0 is the bare version", 7, reg(0, 8), true},
	}
	for _, tc := range cases {
		if got := newer(tc.cur, tc.v); got != tc.isNewer {
			t.Errorf("%s: newer(%#x, %#x) = %v, want %v", tc.name, tc.cur, tc.v, got, tc.isNewer)
		}
	}
	if got := asServed(reg(2, 3), 4); got != reg(2, 4) {
		t.Errorf("asServed: %#x, want %#x", got, reg(2, 4))
	}
	if got := wire.RegistryViewVersion(1, 1<<50); got != reg(1, 1<<wire.ViewEpochShift-1) {
		t.Errorf("saturation: %#x", got)
	}
}
