// Package rawio reads and writes non-blocking TCP sockets without the Go
// runtime's blocking-system-call bookkeeping, for the connections that
// carry a node's requests and its peers' messages.
//
// Why: every read or write through package net enters the kernel with
// syscall.Syscall, which tells the scheduler that the thread may block
// (entersyscall). When the process was idle, that call wakes the runtime's
// monitor thread (sysmon), which then polls every 20 µs for about a
// millisecond before it sleeps again. A lock service at low load goes idle
// between almost every two messages, so on a node of one P this monitor
// was 12–20% of the process's CPU (per-thread figures in
// docs/performance.md), each of its wake-ups a timer and a context switch.
// A read or write of a non-blocking socket never blocks: it copies what
// the socket buffer holds or answers EAGAIN, so the runtime gains nothing
// from the bookkeeping. Wrap enters the kernel with syscall.RawSyscall
// instead and waits for readiness on the netpoller as package net does
// (through syscall.RawConn), so deadlines, Close and the netpoller's
// wake-ups behave as before.
//
// Written here rather than taken from a library: the event-loop libraries
// (gnet and the like) replace the netpoller and the connection's
// goroutine model, which this needs to keep; the part needed is two
// system calls.
//
// Files are not wrapped: a write to a file can sleep in the kernel (dirty
// page throttling), and a raw call would hold the process's only P for it.
package rawio
