// Package conformance holds the scenarios every paxlock client must pass,
// run against a real cluster (make conformance: make run's cluster) by
// the Go client, the Python client (clients/python) and curl speaking the
// API's JSON, each scenario crossing clients where it can: a Go holder
// and a Python holder excluding each other on one key, a Go waiter woken
// by a release made with curl, tokens increasing across all three.
//
// The tests run only with PAXLOCK_CONFORMANCE=1 and the cluster's
// addresses in the environment (see conformance_test.go); make
// conformance sets both.
package conformance
