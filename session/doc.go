// Package session is the connection layer of paxlock's client protocol
// (package wire), written once for every program that speaks it.
//
// A session is one connection from its opening handshake to its end. On
// the dialing side, Conn dials (with a context), sets TCP_NODELAY, runs the
// Handshake (today Hello with namespace, secret and client key), and then
// serves the connection: a writer goroutine sends the frames its owner
// queued, in batches, and keeps the connection alive with Heartbeats; a
// reader hands every frame to the owner's Handler on the reader's own
// goroutine. The Go client's multiplexer, a node's relay to a group master
// and the standalone registry's upstream are Conn's owners.
//
// On the accepting side, Accepted holds one connection's handshake state
// and answers the session's own requests (the SCRAM messages, a relay's
// Hello, Heartbeat, GetView, SubscribeView) through a Host that the paxlock
// node and the registry each implement: the namespaces' verifiers, the
// trust in a relaying node, the view, the replies. The node's gnet event
// loop, its TLS listener's readers and the registry's net.Conn reader call
// it.
package session
