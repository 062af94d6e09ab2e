// Package adminapi holds the JSON types of a paxlock node's admin HTTP API
// (GET /status, /members, /cluster and /events, POST /locks/unlock, the
// member changes, the namespace quotas) and the environment variable of
// its bearer token.
//
// The node (package server) answers with these types and paxlockctl
// decodes them, so that a tool speaking the admin API needs this package
// only, not the node's code. It depends on the standard library and
// package wire alone.
package adminapi
