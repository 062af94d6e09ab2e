package recipe_test

import (
	"testing"

	"github.com/paxlock/paxlock/paxlocktest"
)

// clusterSlots bounds the clusters the package's parallel tests run at
// once to one: each is three nodes of 15 groups under -race, and two or
// more beside the server package's tests starve leases on a 2-core
// machine (masters lapse, tests see NO_MASTER). A test's work outside
// its cluster still overlaps the others'.
var clusterSlots = make(chan struct{}, 1)

// newCluster starts an n-node cluster for t once a slot is free, and
// frees the slot when t's cluster is gone.
func newCluster(t *testing.T, n int, opts ...paxlocktest.Options) *paxlocktest.Cluster {
	t.Helper()
	clusterSlots <- struct{}{}
	t.Cleanup(func() { <-clusterSlots }) // runs after the cluster's own cleanup
	return paxlocktest.NewCluster(t, n, opts...)
}
