package paxos

// Storage is where a runtime (host.Host) keeps the durable state of every
// group it runs: each group's acceptor hard state, log entries, applied
// instance and state-machine keyspace. Package pebblestore implements it.
//
// A Host makes every write of a round in one Batch, for all its groups,
// and applies it without waiting for its fsync (Batch.Apply), so that the
// next round is built while the fsync runs; a separate goroutine waits
// for it (Batch.SyncWait) before the messages that vouch for it leave.
//
// Storage is fail-stop: once any write or fsync fails, the storage has
// failed for good and Err reports it; the Host then stops every group.
// Reads keep working after a failure.
//
// Every method is safe for concurrent use. Writes of one group (its
// batches, TruncateLog and snapshot installs) are serialized by the Host;
// different groups need no coordination.
type Storage interface {
	// LoadGroup returns group g's state as one consistent read: hard
	// state, log start, last stored instance, applied instance and
	// whether a snapshot install was cut short. A group never written
	// has the zero hard state, LogStart 1 and no entries.
	LoadGroup(g GroupID) (GroupState, error)
	// EntriesFrom returns every stored entry of group g at or above from,
	// in instance order, gaps included.
	EntriesFrom(g GroupID, from uint64) ([]Entry, error)
	// Entries returns group g's consecutive stored entries from `from` up
	// to `to` inclusive: it stops at the first missing instance, and
	// after the entry that brings their total encoded size to maxBytes or
	// more (maxBytes <= 0: no limit). It returns nil when `from` is not
	// stored.
	Entries(g GroupID, from, to uint64, maxBytes int) ([]Entry, error)
	// SMReader returns a Reader of group g's state-machine keyspace that
	// sees every write applied so far, synced or not.
	SMReader(g GroupID) Reader
	// NewBatch returns an empty Batch. The Host reuses batches: a Batch is
	// empty again after a successful Commit or SyncWait.
	NewBatch() Batch
	// TruncateLog deletes group g's entries below `before` and records
	// that the log starts there. It makes every earlier write durable
	// first, and refuses to go past the applied instance + 1 or while a
	// snapshot install is unfinished. It does nothing if before is at or
	// below the log start.
	TruncateLog(g GroupID, before uint64) error
	// OpenSnapshot opens a consistent image of group g's state-machine
	// keyspace and applied instance, to be streamed in chunks of at most
	// chunkSize bytes. It fails while an install of g is unfinished.
	OpenSnapshot(g GroupID, chunkSize int) (SnapshotSource, error)
	// BeginInstall durably marks group g as restoring (LoadGroup reports
	// it until the install finishes, also across a restart) and clears its
	// state-machine keyspace, to receive a snapshot.
	BeginInstall(g GroupID) (SnapshotInstall, error)
	// Err returns nil while the storage is healthy, and after a failure
	// the error that failed it, which matches ErrStorageFailed.
	Err() error
}

// Batch collects writes of one or more groups and makes them durable
// together. The Host calls Apply then SyncWait for a round whose writes
// must be durable before its messages leave, and Commit(false) for one
// whose writes may be lost in a crash (they are redone from the log).
// Any error from Commit, Apply or SyncWait means the storage failed: Err
// reports it from then on. A Batch is not safe for concurrent use.
type Batch interface {
	// SetHardState records group g's hard state.
	SetHardState(g GroupID, hs HardState)
	// PutEntry stores e in group g's log under e.Instance, replacing any
	// entry there. e is not retained.
	PutEntry(g GroupID, e *Entry)
	// SetApplied records the last instance whose commands group g's
	// state-machine keyspace reflects; it is written with those writes.
	SetApplied(g GroupID, inst uint64)
	// SM returns a Writer into group g's state-machine keyspace that adds
	// its writes to the batch.
	SM(g GroupID) Writer
	// Empty reports whether the batch holds no writes.
	Empty() bool
	// Commit writes the batch atomically. With sync it returns once the
	// writes, and every write before them, are durable (an empty batch
	// then still waits for the earlier ones); without, they are visible
	// at once and durable with a later sync. The batch is then empty.
	Commit(sync bool) error
	// Apply writes the batch atomically and starts making it durable
	// without waiting: the writes are visible at once. The batch may not
	// be written to or committed again until SyncWait returned.
	Apply() error
	// SyncWait waits until the writes of the last Apply, and every write
	// before them, are durable, then empties the batch. Without an Apply
	// it returns nil at once.
	SyncWait() error
	// Close releases the batch without writing what it holds (after
	// waiting for an Apply's sync, if one is under way).
	Close()
}

// SnapshotSource streams a snapshot of one group's state-machine keyspace.
// It is not safe for concurrent use; Close it when done.
type SnapshotSource interface {
	// Applied returns the instance the snapshot reflects.
	Applied() uint64
	// Next returns the next chunk, valid until the next call; last is
	// true on the final one (which may be empty). A chunk holds whole
	// key/value pairs, for SnapshotInstall.AddChunk.
	Next() (chunk []byte, last bool, err error)
	// Close releases the snapshot; it is safe to call more than once.
	Close() error
}

// SnapshotInstall receives a snapshot of one group's state-machine
// keyspace from a SnapshotSource. It is not safe for concurrent use.
type SnapshotInstall interface {
	// AddChunk writes one chunk's pairs. A malformed chunk writes
	// nothing and returns an error matching ErrCorrupt.
	AddChunk(chunk []byte) error
	// Finish completes the install of a snapshot taken at instance
	// applied, durably and atomically: the applied instance, a committed
	// instance at least as high, a log that starts above applied, and
	// the group no longer restoring.
	Finish(applied uint64) error
	// Abort abandons the install; the group stays restoring until a new
	// install finishes. It is safe after Finish and more than once.
	Abort() error
}

// GroupState is what a group's runtime needs at start.
type GroupState struct {
	// Hard is the acceptor's hard state (zero if never written).
	Hard HardState
	// LogStart is the first instance still held in the log (1 when never
	// truncated).
	LogStart uint64
	// Last is the highest instance with a stored entry (0 if none, even
	// after a truncation: then LogStart-1 is the highest instance the log
	// ever covered).
	Last uint64
	// Applied is the last instance whose commands are reflected in the
	// state-machine keyspace.
	Applied uint64
	// Restoring says a snapshot install was interrupted: the state-machine
	// keyspace is garbage until a new install finishes.
	Restoring bool
}

// Writer writes into one group's state-machine keyspace. Keys and values are
// copied; the caller may reuse them at once.
type Writer interface {
	Set(key, value []byte)
	Delete(key []byte)
}

// Reader reads one group's state-machine keyspace.
type Reader interface {
	// Get returns a copy of the value of key, if set.
	Get(key []byte) ([]byte, bool, error)
	// Scan calls fn for every key that starts with prefix, in key order,
	// until fn returns an error, which Scan returns. key and value are
	// valid only during fn.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}
