// Package fakewire is a fake paxlock node for the tests of the protocol's
// dialing side (the Go client, the standalone registry's upstream): a TCP
// listener whose connections speak the client protocol through the real
// accepting side of a session (session.Accepted), and answer everything
// else with the handlers a test registers per message type.
//
// The handshake (SCRAM-SHA-256 against the namespaces' verifiers),
// Heartbeat and the framing are therefore the code a paxlock node runs;
// what a test fakes is only the answers: a lock table, a view, refusals.
// On top of that a Server counts the requests it received by type, can
// freeze (read every frame and answer none) and close its connections,
// and a Conn can push any frame to its client.
//
// The package is internal: its API serves this module's tests and changes
// with them.
package fakewire
