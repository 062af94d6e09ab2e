// Package adminhttp is a paxlock node's admin endpoint, the HTTP side of
// the admin API whose bodies are package adminapi's: the routes, each
// request's parsing and validation, the JSON answers and their status
// codes, redirects of what only another node can do (group 0's master,
// a key's group master), the token and the guard against cross-site and
// DNS-rebinding requests (internal/adminguard), the bounds of its HTTP
// server, and the web console's page. It does nothing itself: every
// report and procedure is the node's, asked through the Node interface,
// which package server implements; it does not import server.
//
// Errors from Node are the lock service's (group's sentinels,
// wire.ErrInvalid): a handler maps them to an HTTP status, and sends
// their text, which never holds a secret.
//
// # Files by job
//
//   - The endpoint: handler.go (Config, New: the mux and its guards),
//     node.go (Node, what the handlers ask of the node), errors.go
//     (the classes of its errors, which decide the HTTP status),
//     auth.go (RequireToken, Public: the paths served without the
//     token), redirect.go (to another node's admin endpoint),
//     stream.go (NewServer and Limits, the HTTP server's bounds;
//     StreamWriter, a streamed answer's write deadline).
//   - Reports: status.go (/status, /healthz, /readyz, and POST and
//     DELETE /drain), console.go (the console's page and files in
//     console/, GET /cluster and the /events stream), console_locks.go
//     (ForwardNode; the console's lock page and force-unlock, GET
//     /cluster/locks/{ns}/{key} and POST /cluster/unlock, answered by
//     the key's master through this node).
//   - The namespace table: namespaces.go (/namespaces and their quotas),
//     unlock.go (POST /locks/unlock, an operator's force-unlock),
//     locks.go (LockNode; GET /locks and GET /locks/{ns}/{key}, the
//     admin token's reads of any namespace's locks), clients.go
//     (ClientNode; GET /clients, the nodes' client sessions in pages).
//   - Membership: members.go (MemberNode; GET, POST and DELETE
//     /members, POST /members/groups/{g}, a group's change of
//     acceptors).
//   - The audit log: audit.go (AuditNode; the middleware that records
//     every change answered here, GET /audit, POST /audit from peers),
//     audit_target.go (a request's action, namespace and target, from
//     its route and the body's harmless fields only).
//   - Backups: backup.go (BackupNode; GET /backup, and GET
//     /backup/image, one group's image between nodes, with ReadImage,
//     its reader).
//   - Namespace moves: moves.go (MoveNode, MoveStep; GET /moves/{ns},
//     its export, and POST of each step).
//   - The registry's tables: registry.go (their changes),
//     registry_page.go (GET /registry, whole or in pages).
package adminhttp
