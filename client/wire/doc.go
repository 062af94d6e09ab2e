// Package wire is paxlock's client protocol: the frame format, the message
// types, the status codes and the key hash. It is the one place client and
// server agree, and imports nothing else of the project.
//
// # Frames
//
// A connection carries frames in both directions:
//
//	u32 length    big-endian; counts the bytes after itself (10 + body)
//	u8  version   Version (1); anything else is ErrBadVersion
//	u8  type      Type
//	u64 reqID     big-endian
//	... body      one msgpack value, the message for type
//
// HeaderSize is 14. A receiver bounds the whole frame (DefaultMaxFrame,
// 1 MiB, unless configured) and closes a connection whose framing breaks
// (ErrFrameTooLarge, ErrBadLength, ErrBadVersion); ParseFrame detects these
// from the first five bytes. An unknown type or an undecodable body leaves
// the stream intact: the server answers BAD_REQUEST and reads on.
//
// Requests are pipelined: a client may send many before the replies come,
// and the server answers each by its request id, in any order. Request ids
// are chosen by the client, nonzero, and unique among its requests in
// flight on that connection. Request id 0 marks a server push.
//
// # Session
//
// A client's connection opens with a SCRAM-SHA-256 exchange (protocol
// version 2; see ScramClientFirst): ScramClientFirst (namespace, client id,
// client key, client-first-message), ScramServerFirst, ScramClientFinal
// (the proof), ScramServerFinal. The secret itself never travels. A node
// relaying a client's requests proves that it is a node of the cluster:
// with Hello (Via set, no secret) on the TLS listener with its node
// certificate when the peers use TLS, else with the same SCRAM exchange,
// Via set, proving the cluster's relay secret (see ScramClientFirst). The server answers AUTH_FAILED to lock requests until a
// handshake succeeds; Heartbeat, GetView and SubscribeView are answered
// without one. The namespace applies to every later request on the
// connection; see Hello for why it is per connection while the lock owner
// is per request. The client id must be the one the key derives
// (ClientIDOf), and a request whose Owner names another client id is
// answered AUTH_FAILED: owners are bound to the session that proved them.
//
// # Messages
//
// Every body is a msgpack array of the message's fields in the order below.
// Integers use the smallest msgpack encoding; strings are msgpack str;
// nested records are arrays. A receiver treats missing trailing fields as
// zero and skips extra trailing fields, so a later version may append
// fields without breaking older peers; it never reorders or removes them.
// An Owner is two fields, client then id.
//
//	type  name           dir   body fields
//	0x01  Hello          c→s   Namespace, Secret, ClientID, Agent, [Via, ClientKey]
//	0x02  Acquire        c→s   Key, Owner, Kind, Flags, Weight, TTLMs, MaxWaitMs, WaitID,
//	                           [Redirects, Value, Permits, Limit, LockDelayMs, WaitedMs, Trace,
//	                           MaxHoldMs]
//	0x03  Renew          c→s   Key, Owner, Token, TTLMs, [Redirects, SetValue, Value]
//	0x04  Release        c→s   Key, Owner, Token, [Redirects, PassOnID, PassOnTTLMs, PassOnValue,
//	                           PassOnLockDelayMs, Trace, KeepPermits]
//	0x05  State          c→s   Key, [Redirects, Token]
//	0x06  Watch          c→s   Key, WatchID, Token, Flags, MaxWaitMs, [Redirects, Group]
//	0x07  Unwatch        c→s   Key, WatchID, [Redirects, Flags, Group]
//	0x08  CancelWait     c→s   Key, Owner, WaitID, [Redirects]
//	0x09  Heartbeat      c→s   (none)
//	0x0A  GetView        c→s   (none)
//	0x0B  SubscribeView  c→s   (none)
//	0x0D  ScramClientFirst c→s Namespace, ClientID, Agent, ClientKey, Mechanism, Message, [Via]
//	0x0E  ScramClientFinal c→s Message
//	0x0F  MultiAcquire   c→s   Owner.Client, Keys [Key...], IDs [Owner.ID...], TTLMs,
//	                           Redirects, [Value]
//	0x40  Response       s→c   Status, Token, Holder, TTLLeftMs, QueueLen, Kind,
//	                           Readers, RetryAfterMs, Redirect, ViewVersion, Msg, Value,
//	                           Locks, Permits, InUse, Tokens [Token...], KeyIndex
//	0x41  View           s→c   Version, Groups [[Master, Addr, Epoch]...],
//	                           Nodes [[ID, Addr, Alive]...]
//	0x42  ScramServerFirst s→c Message
//	0x43  ScramServerFinal s→c Message, ViewVersion
//	0x80  Granted        push  WaitID, Key, Status, Token, Owner, [TTLMs]
//	0x81  Lost           push  Key, Token, Owner, Event
//	0x82  WatchEvent     push  WatchID, Key, Event, Token, Holder, [Value]
//	0x83  ViewChanged    push  (same body as View)
//
// Every request gets exactly one reply with its id: a Response, except that
// a successful GetView or SubscribeView gets a View, and an accepted
// ScramClientFirst or ScramClientFinal its Scram server message. Response omits its
// trailing zero fields, and a request or push its trailing [bracketed]
// fields when they are zero (a holder Value is msgpack bin, every other
// string msgpack str). Pushes carry request id 0 and name their subject in
// the body: a blocked Acquire's WaitID (Granted), a Watch's WatchID
// (WatchEvent), a held lock's key and token (Lost).
//
// # Acquiring
//
// The client computes h := KeyHash(namespace, key) and sends Acquire to the
// master of group GroupOf(h, len(view.Groups)); a server hands it to worker
// WorkerOf(h, workers) of that group. With MaxWaitMs 0 (try-lock) the reply
// is SUCCESS with the fencing token or LOCK_OCCUPIED. With MaxWaitMs > 0 and
// the key held, the reply is LOCK_WAIT and the outcome arrives later as a
// Granted push for the request's WaitID; the client may give up with
// CancelWait. A node that is not the group's master answers MASTER_REDIRECT
// with the master's address, or NO_MASTER during an election; once the
// request's Redirects reaches the node's budget, or is ForwardNow, the node
// forwards it to the master and relays the reply and pushes (see Routed).
// Fencing
// tokens are groupVersion<<48 | instanceID (MakeToken) and strictly
// increase per key.
//
// # Encoding in Go
//
// Messages implement msgpack.CustomEncoder and CustomDecoder by hand (no
// reflection). A Codec reuses one Encoder and one Decoder, so AppendFrame
// writes a frame into the caller's buffer without allocating, and decoding
// allocates only the message and its strings (none but the strings with
// DecodeInto). The package-level AppendFrame, Decode and DecodeInto draw
// Codecs from a pool.
//
// # Test vectors
//
// docs/protocol.md describes the protocol for implementers in other
// languages; testdata/vectors.txt holds hex frames of every message type,
// key hashes, tokens and client ids that TestVectors decodes and re-encodes
// byte for byte (go test ./wire -run TestVectors -update regenerates it).
//
// # Files by job
//
//   - frame.go: the frame header; ParseFrame, ReadFrame and their bounds.
//   - types.go: message types, status codes, kinds, events and the
//     protocol's constants.
//   - codec.go: Message, Codec, AppendFrame and Decode: encoding and
//     decoding a frame's body.
//   - messages.go: Request and Routed, Hello, and the lock requests
//     Acquire, Renew and Release with the owner they name.
//   - multi.go: MultiAcquire.
//   - query.go: State, Watch, Unwatch, List, CancelWait, Heartbeat,
//     GetView and SubscribeView.
//   - auth.go: the SCRAM handshake's messages.
//   - response.go: Response, the reply to every request.
//   - push.go: the pushes: Granted, Lost, watch events.
//   - view.go: View, the cluster view.
//   - registry.go: SubscribeRegistry and RegistryTables, a registry's
//     feed from the meta cluster.
//   - registry_page.go: the tables in pages under RegistryPageBytes, and
//     RegistryAssembly, which gathers one version's pages.
//   - hash.go: KeyHash, GroupOf, WorkerOf, MakeToken and the validation
//     of keys, values and namespaces, with their bounds.
//   - owner.go: ClientIDOf, a client id derived from its key.
package wire
