// Package clienttests holds the tests of the client module
// (github.com/paxlock/paxlock/client) that need real nodes: the client's
// examples, run against a 3-node cluster of package paxlocktest; the
// recorded session transcript of the native protocol
// (client/wire/testdata/session.txt); and the client's behaviour against
// a node where a fake one cannot stand in (validity after a queued grant,
// Close releasing every hold, a read-write downgrade). Subpackage recipe
// does the same for package client/recipe.
//
// They live in the root module, not in the client's, so that the client
// module requires only what the client needs: a user's go get of the
// client never pulls Pebble, gnet or memberlist.
package clienttests
