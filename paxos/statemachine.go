package paxos

// StateMachine is the replicated application a runtime (host.Replica)
// drives. Apply runs on every replica in log order, on the host's loop (one
// loop drives every group of a Host), so it must not block.
type StateMachine interface {
	// Apply applies the commands chosen for instance, in order. It records
	// its persistent changes in w, which the runtime commits atomically
	// with the applied instance, and sets results[i] to what the proposer
	// of cmds[i] gets back. It must be deterministic.
	Apply(instance uint64, cmds [][]byte, w Writer, results []any)
	// Load rebuilds in-memory state from the persistent keyspace; it runs
	// when the group opens and after a snapshot was installed.
	//
	// Keys that start with the byte 0x00 belong to the runtime (the
	// group's member set is recorded there): a state machine neither
	// writes them nor lets them confuse its Load.
	Load(r Reader, applied uint64) error
}

// Checkpointer is a StateMachine that keeps its state in memory and writes
// it to its keyspace only at checkpoints, with the log as the durable
// record in between: its Apply writes little or nothing, and the runtime
// records the applied instance only with a checkpoint, so a restart loads
// the last checkpoint and replays the log above it. The log is truncated
// only behind the last checkpoint, and snapshots are streamed from it.
type Checkpointer interface {
	StateMachine
	// Checkpoint writes into w every change since the previous checkpoint
	// (or Load), so that the keyspace reflects every applied instance. It
	// runs on the host's loop, after Apply.
	Checkpoint(w Writer)
	// CheckpointDue reports whether the state machine holds enough
	// unwritten changes to want a checkpoint before the runtime's
	// interval (host.ReplicaConfig.CheckpointEvery) is up.
	CheckpointDue() bool
}

// MasterObserver, when a StateMachine implements it, is told on the host's
// loop whenever the replica's view of mastership changes.
type MasterObserver interface {
	MasterChanged(s SoftState)
}

// Result is what a proposer gets back for one command.
type Result struct {
	// Instance is the instance that chose the command, and Index its
	// position in that instance's batch.
	Instance uint64
	Index    int
	// Value is what the state machine returned for the command.
	Value any
	// Err is non-nil when the command did not take effect (ErrNotMaster,
	// ErrOverloaded, ErrNotChosen, ErrStopped, ErrTooLarge), or when its
	// outcome is unknown because the replica stopped while the command
	// was in flight (ErrOutcomeUnknown, which also matches ErrStopped).
	Err error
}

// Callback receives a command's Result. It runs on the host's loop, which
// drives every group of the Host (or, for errors found at once, on the submitter's) and must not block.
type Callback func(Result)
