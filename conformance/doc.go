// Package conformance holds the scenarios every paxlock client must pass,
// run against a real cluster (make conformance: make run's cluster) by
// the Go client, the Python client (clients/python) and curl speaking the
// API's JSON, each scenario crossing clients where it can: a Go holder
// and a Python holder excluding each other on one key, a Go waiter woken
// by a release made with curl, tokens increasing across all three.
//
// The recipes (recipes_test.go) are crossed the same way: a maximum hold
// time ends a Go hold and a Python hold before a curl waiter gets the key;
// a Go and a Python prefix watch report what curl does under the prefix;
// a Python, a Go and a curl holder each give back some of a semaphore
// grant's permits, letting the others' waiters in. curl watches no
// prefix there: a server stream is a sequence of length-prefixed
// envelopes (Connect's streaming framing) that curl prints but does not
// split, so a shell caller would need a decoder of its own; it makes the
// changes the watches report instead. The API form of a partial release
// keeps a count (keep_permits), not the Go client's permit ids, which
// are that client's own bookkeeping.
//
// The tests run only with PAXLOCK_CONFORMANCE=1 and the cluster's
// addresses in the environment (see conformance_test.go); make
// conformance sets both.
package conformance
