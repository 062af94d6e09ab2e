package testutil

import "go.uber.org/goleak"

// LibraryGoroutines are goleak options that ignore goroutines our
// dependencies keep after we have stopped them, which are therefore not a
// test's leak:
//
//   - gnet's default worker pool (ants) starts two goroutines when the
//     package is loaded; they live for the process.
//   - memberlist's Shutdown does not wait for a probe in flight: probeNode
//     (and its fallback TCP ping) waits for its ack timer, which fires
//     within one ProbeInterval after Shutdown returns, and then ends. Under
//     load that can outlast goleak's retries; CI once failed on exactly
//     this goroutine.
func LibraryGoroutines() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		// The fallback TCP ping is probeNode's second closure (the
		// first is a deferred one).
		goleak.IgnoreAnyFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode.func2"),
	}
}
