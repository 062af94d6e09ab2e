// Package server is one paxlock node. It wires the parts together: the
// node's Pebble store (paxos/pebblestore), the peer transport
// (paxos/tcpnet), the replicas of every Paxos group on one host loop
// (paxos/host), and the lock service applied on them (group). It serves
// clients over the binary protocol (goroutines on Go's netpoller, or gnet's
// event loops; TLS on a listener of its own), forwards or redirects
// requests to group masters, publishes the cluster view, gossips
// membership for placement (internal/gossip), and serves the admin API
// (adminhttp, whose bodies are adminapi's), metrics and the web
// console.
//
// # Files by job
//
//   - Wiring and lifecycle: new.go (New: storage, the host and the
//     groups, undone in one place when a step fails), server.go (Server, Start, Shutdown, the background work
//     Shutdown waits for), view.go (the cluster view: the groups'
//     masters, the alive flags, its subscribers), seed.go (seeding lock
//     group 0's namespace table on a new cluster), drain.go (handing
//     every group over before a planned stop), identity.go (the data
//     directory's IDENTITY and incarnation), retry.go (retry with
//     backoff), faults.go (injected partitions for tests).
//   - Configuration: config.go (Config, Load, its log form),
//     config_defaults.go (EnsureDefaults), config_validate.go
//     (Validate), config_secrets.go (the gossip keys, admin token and
//     relay secret, read from files or the environment),
//     config_limits.go (ConnLimits, a connection's bounds),
//     config_session.go (SessionLimits, connections per namespace),
//     config_consensus.go (ConsensusLimits, what a group's core takes
//     from a peer), config_registry.go (RegistryLimits, the registry's
//     tables).
//   - The client edge: conn.go (a client connection: conn, its engine
//     interface frameConn, its end, the sweep of idle and unauthenticated
//     connections), conn_output.go (replies and pushes: the group.Sink,
//     the output bound, slow consumers), request.go (handleFrame: each
//     request's prelude and its route to the lock service, a forward or
//     a redirect), translate.go (a wire request as the lock service's
//     group.Request), conn_preauth.go (the bounds of a connection not yet
//     authenticated), conn_reply.go (answering a request that could not
//     be sent), connauth.go (the session's Host: credentials, relay
//     trust, revocation checks), outbudget.go (max_output_total, the
//     node-wide budget of queued output), relay.go (forwarding a request
//     to its group's master over a relay session, and the address to
//     relay to).
//   - The listeners and their engines (frameConn): gnetconn.go (gnetConn
//     and gnet's event handler: the event loops read and write),
//     gnetlistener.go (the gnet listener: the node's accept loop
//     enrolling into gnet's event loops), goconn.go (goConn: a reader and
//     a writer goroutine per connection, TLS or plain), golistener.go
//     (the netpoll and TLS listeners, the TLS handshake), tls.go (the TLS
//     client listener's configuration), listen.go (the listeners'
//     health).
//   - Membership: membership.go (gossip and master placement), members.go
//     (following the member list: peers, address book, view),
//     members_admin.go (the members report, waiting for group 0's
//     master), members_change.go (adding and
//     removing a node across the groups), members_resume.go (resuming a
//     half-done change), members_peers.go (the PEERS file of
//     peer incarnations), join.go (paxlockd -join and admin calls to
//     other nodes).
//   - The admin API, whose HTTP side is package adminhttp: admin.go
//     (the endpoint wired: adminhttp's Config, the HTTP server's
//     bounds), admin_errors.go (the
//     lock service's errors in the endpoint's classes), admin_node.go
//     (adminNode, the node as adminhttp.Node), admin_guard.go (the names
//     the endpoint answers to, for internal/adminguard's DNS-rebinding
//     checks), admin_audit.go (the audit log: a record proposed to group 0
//     or relayed to its master; GET /audit's reads;
//     paxlock_audit_records), admin_quota.go (quotas and their use, merged over the
//     nodes), admin_locks.go (the admin lock reads: a page gathered from
//     every group's master, a key's detail), admin_clients.go (GET /clients:
//     every node's client sessions, a page at a time), admin_peer.go (a GET
//     of a peer's admin endpoint, decoded), admin_forward.go (an admin
//     request forwarded to a peer for the console), security.go (peer and admin TLS, the admin token),
//     health.go (Ready), backup.go (a backup of every group's image from
//     its master; Restore), move.go (the namespace-move steps, taken in
//     every group on its master), console.go (the
//     console's /cluster snapshot gathered from every node, the master
//     changes a node saw), console_namespaces.go (every namespace's
//     counts, merged over the nodes).
//   - The registry's tables served to registry processes:
//     registry_serve.go (SubscribeRegistry).
//   - Metrics: metrics.go (the Prometheus registry and the observers of
//     host and group), metrics_certs.go (certificate expiry),
//     metrics_conns.go (connection bounds), metrics_peers.go (peer
//     messages refused), metrics_quota.go (quota
//     usage), metrics_storage.go (Pebble and the data directory),
//     metrics_build.go (paxlock_build_info).
package server
