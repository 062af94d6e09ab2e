// Package apiserver serves paxlock's API, the service paxlock.v1.LockService
// of api/paxlock/v1, with connectrpc.com/connect: one handler answers
// gRPC, gRPC-Web and the Connect protocol (binary or JSON, so curl
// works) over HTTP/1.1 and HTTP/2.
//
// It is a client of its own node, not a second lock service: a
// namespace's calls go over sessions into the node (Node.ServeLocal:
// in-process connections the node serves as its client port's), one lane
// of them per master of the keys' groups (lanes.go), over which every API
// call becomes the native protocol's request. So the
// node translates it to the lock service's request as it does a socket's,
// every bound and quota of the native protocol applies (per session:
// max_inflight, the waits and watches per connection; per namespace), a
// blocking acquire waits in the master's queue and is woken by the grant's
// push, and a key whose group another node masters is forwarded there over
// the node's relay (requests go out with wire.ForwardNow).
//
// Owners. An API owner is a string the caller picks. It becomes the wire
// owner {Client: the namespace's API client id, ID: a hash of the string}
// (ownerOf): the same string names the same owner on every node, so
// Release and Renew by it match its Acquire, and any other string is
// another owner, refused PERMISSION_DENIED.
//
// Authentication. HTTP Basic namespace:secret, checked against the
// namespace's stored SCRAM verifier (authCache: a verified secret costs no
// key derivation again until the verifier changes); under client_tls
// bind_namespace the caller's verified client certificate must name the
// namespace too. The listener is TLS whenever the node has a certificate.
//
// # Files by job
//
//   - service.go: Service, the LockService handler methods.
//   - lanes.go: which session a call takes: a lane per master, a pool
//     of sessions per lane, reads sent again over a fresh session.
//   - session.go: one session into the node: calls, waits,
//     watches and the pushes that end them.
//   - acquire.go: Acquire and MultiAcquire, the blocking wait.
//   - watch.go: Watch; prefix.go: WatchPrefix, a native prefix watch
//     per lock group merged onto one stream.
//   - auth.go: Basic credentials, the verifier check and its cache.
//   - convert.go: owners, kinds, states; errors.go: statuses as Connect
//     errors.
//   - listen.go: Listener, the HTTP server (TLS or h2c).
//   - hint.go: the routing hints every answer about a key carries
//     (Paxlock-Node, Paxlock-Master, Paxlock-Group; docs/api.md, Routing).
package apiserver
