// Package systable holds lock group 0's system tables and every lock
// group's move records, each a type of its own with its ops, its outcomes
// (statuses of its own, never a lock status), its load from a checkpoint
// and its records' encoding. Package
// group's state machine holds one of each next to its lock table, sends
// each command to the table it changes and, in a load from a checkpoint,
// each pair to the table that claims its key (Table); a table knows
// nothing of locks (Moves asks the lock table through MoveLocks),
// commands' framing or Paxos beyond the keyspace writer it writes to.
//
// # Files by job
//
//   - audit.go: Audit, the audit log (the last records of the changes
//     made through the admin API, trimmed to the bound each command
//     carries); AuditFilter, AuditOutcome.
//   - auditrecord.go: AuditRecord, a record's and a command's encoding.
//   - members.go: Members, the cluster's member list (a record per node
//     id with its state, incarnation and addresses); MemberOutcome.
//   - moves.go: Moves, a lock group's move records (every group's, not
//     only group 0's): the steps' rules, the gates, the checkpoint;
//     MoveStep, MoveOutcome; MoveLocks, what a step asks of the lock
//     table.
//   - moverecord.go: MoveState, a move record's encoding, a step's data.
//   - namespaces.go: Namespaces, the namespace table (a record per
//     namespace, the installed mark); NamespaceOutcome.
//   - nsrecord.go: a namespace's record (its SCRAM verifier, or a
//     version-1 salted hash), SeedVerifier and the install list.
//   - quotas.go: Quotas, the namespaces' quotas (a record per namespace
//     with one); Quota; QuotaOutcome.
//   - registry.go: Registry, the registry's tables (clusters, namespaces'
//     assignments, moves) and their shared version; RegistryOutcome.
//   - regrecord.go: the registry's records and their checks.
//   - reglimits.go: RegistryLimits and Registry.Room, the tables' bounds.
//   - table.go: Table, what a checkpoint load and a backup need of
//     every table (the keys it claims, its load and check of a pair).
//
// Records decode with internal/codec's Reader.
package systable
