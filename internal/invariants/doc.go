// Package invariants says whether expensive self-checks are compiled in.
//
// Build or test with -tags invariants to turn them on:
//
//	go test -tags invariants ./paxos/
//
// Code guards each check with `if invariants.Enabled { ... }`; Enabled is a
// constant, so without the tag the compiler drops the check and it costs
// nothing.
package invariants
