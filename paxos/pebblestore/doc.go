// Package pebblestore is the Pebble implementation of paxos.Storage: one
// database per node holds the durable state of every Paxos group the node
// replicates (hard state, log, applied instance, state-machine keyspace),
// and fails stop after the first failed write or fsync.
//
// # Files by job
//
//   - store.go: Options, Open, Store (writes, syncs, Close) and the logger
//     handed to Pebble.
//   - keys.go: the key layout and the reads of single values.
//   - read.go: LoadGroup, the log reads and the state-machine Reader.
//   - write.go: batches (the state-machine Writer, Commit, Apply and
//     SyncWait) and log truncation.
//   - snapshot.go: streaming a group's keyspace out (OpenSnapshot) and
//     installing one (BeginInstall).
//   - storefs.go: the fail-stop latch and the filesystem that fences Pebble
//     off the disk once the store failed.
//   - uring_linux.go: fdatasync through io_uring, so that a sync does not
//     block an OS thread, and a WAL's write linked to it.
//   - walwrite.go: WAL files whose writes wait for their next sync and
//     leave with it in one io_uring submission (walFile).
//   - walspare.go: zero-filled spare WAL files, so that the WAL's fsyncs
//     write over allocated blocks instead of appending.
//   - metrics.go: the engine's metrics (Metrics) and the directory's
//     space on disk by kind of file (DirUsage; alloc_*.go read a file's
//     allocated blocks).
//   - compactsched.go: Pebble's compaction scheduler without its ticker:
//     it wakes only while a compaction waits for a grant, so that an idle
//     store stays idle.
package pebblestore
