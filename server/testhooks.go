package server

import "sync/atomic"

// testHooks are the knobs through which the package's tests inject faults
// into one cluster's nodes (Config.hooks, shared by the cluster's
// configurations, so that parallel tests do not see each other's); nil in
// production.
type testHooks struct {
	// failGroupChange, when set, is called as a node's member-change
	// procedure starts group g's change, and fails it at once with the
	// error it returns.
	failGroupChange atomic.Pointer[func(node uint32, g int) error]
	// skipIncarnations, when set, keeps recordIncarnations from recording
	// anything: the member list stays as during bootstrap.
	skipIncarnations atomic.Bool
}
