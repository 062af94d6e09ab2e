// Package adminapi holds the JSON types of a paxlock node's admin HTTP API
// (GET /status, /members, /cluster and /events, POST /locks/unlock, the
// member changes, the namespace quotas) and the environment variable of
// its bearer token.
//
// The node (package server) answers with these types and paxlockctl
// decodes them, so that a tool speaking the admin API needs this package
// only, not the node's code. It depends on the standard library and
// package wire alone.
//
// # Files by job
//
//   - status.go: GET /status: NodeAddr, GroupStatus and the node's Status.
//   - console.go: GET /cluster, the whole cluster as the console shows it.
//   - members.go: the member list and its changes (GET, POST /members,
//     DELETE /members/{id}).
//   - clients.go: GET /clients, a page of the nodes' client sessions,
//     and its cursor.
//   - unlock.go: POST /locks/unlock (force-unlock) and its answer.
//   - drain.go: POST /drain and its answer.
//   - quota.go: namespace quotas and their use.
//   - registry.go: the registry's tables as a meta cluster's nodes show
//     them, without verifiers.
//   - move.go: the steps of moving a namespace between clusters and their
//     answers.
//   - token.go: TokenEnv, the admin token's environment variable.
package adminapi
