package paxos

// Transport delivers messages between the replicas of every group on a
// node; a runtime (package host) sends through it and is its handler.
// *tcpnet.Transport and paxostest.MemNetwork's endpoints implement it.
type Transport interface {
	// Send hands msgs to their nodes, a message to this node included
	// (to the handler, like any other). It never blocks on a slow or dead
	// peer: it may drop any message (Paxos tolerates loss), but it never
	// alters one. It may be called concurrently, and must not keep msgs
	// after it returns (the Host reuses the slice); it may keep the
	// messages' Entries and Chunk, which neither side modifies.
	Send(msgs []Message)
	// Close stops the transport: queued messages are dropped, nothing
	// more is delivered, and a later Send drops its messages.
	Close() error
}
