// Package session is the connection layer of paxlock's client protocol
// (package wire), written once for every program that speaks it.
//
// A session is one connection from its opening handshake to its end. On
// the dialing side, Dial connects (with a context), sets TCP_NODELAY, runs
// the Handshake (SCRAM for a client: ScramClientFirst, ScramServerFirst,
// ScramClientFinal, ScramServerFinal; RelayHello for a node's relay under
// peer TLS), and then serves the connection: a writer goroutine sends the
// frames its owner queued, in batches, and keeps the connection alive with
// Heartbeats; a reader hands every frame to the owner's Handler on the
// reader's own goroutine. The Go client's multiplexer, a node's relay to a
// group master and the registry's upstream are Conn's owners.
//
// On the accepting side, Accepted holds one connection's handshake state
// and answers the session's own requests (the SCRAM messages, a relay's
// Hello, Heartbeat, GetView, SubscribeView) through an Endpoint that the
// paxlock node and the registry each implement: the namespaces' verifiers, the
// trust in a relaying node, the view, the replies. Whether a session is
// authenticated is explicit (Accepted.Authenticated); views are served
// before authentication on purpose (viewsNeedHello).
//
// # Files by job
//
//   - conn.go: the dialing side: Config, Dial, Conn (its writer and reader
//     goroutines, heartbeats, Close) and the Handler it feeds.
//   - handshake.go: the handshakes a Conn runs (Handshake and its
//     Exchange, SCRAM, RelayHello) and RefusedError.
//   - accept.go: the accepting side: Accepted, its Endpoint and Identity.
//   - admit.go: the prelude every accepting side runs on a request
//     (DecodeRequest, Accepted.Admit), shared by the node, the registry
//     and internal/fakewire.
package session
