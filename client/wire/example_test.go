package wire_test

import (
	"fmt"

	"github.com/paxlock/paxlock/client/wire"
)

// A client encodes pipelined requests into one buffer; the server parses
// frames out of whatever bytes have arrived and answers by request id.
func Example() {
	var c wire.Codec // one per connection or event loop

	// Client side: the client id is derived from a private key that the
	// Hello proves (a random one, in a real client).
	const key = "an example client key"
	id := wire.ClientIDOf(key)
	out, _ := c.AppendFrame(nil, wire.TypeHello, 1, &wire.Hello{Namespace: "orders", Secret: "s", ClientID: id, ClientKey: key})
	out, _ = c.AppendFrame(out, wire.TypeAcquire, 2, &wire.Acquire{
		Key: "order:42", Owner: wire.Owner{Client: id, ID: 1},
		Weight: wire.DefaultWeight, TTLMs: 30000,
	})

	// Server side: out stands for the connection's inbound buffer.
	in := out
	var acq wire.Acquire // reused across requests
	for {
		f, n, err := wire.ParseFrame(in, wire.DefaultMaxFrame)
		if err != nil {
			fmt.Println("close connection:", err)
			return
		}
		if n == 0 {
			break // partial frame: wait for more bytes
		}
		switch f.Type {
		case wire.TypeHello:
			fmt.Println("hello", f.ReqID)
		case wire.TypeAcquire:
			if err := c.DecodeInto(f.Body, &acq); err != nil {
				fmt.Println("bad request:", err)
				break
			}
			h := wire.KeyHash("orders", acq.Key)
			fmt.Printf("acquire %d: %s -> group %d\n", f.ReqID, acq.Key, wire.GroupOf(h, wire.DefaultGroups))
		}
		in = in[n:]
	}

	// The reply, by request id.
	reply, _ := c.AppendFrame(nil, wire.TypeResponse, 2, &wire.Response{Status: wire.StatusSuccess, Token: wire.MakeToken(1, 7)})
	f, _, _ := wire.ParseFrame(reply, 0)
	m, _ := c.Decode(f.Type, f.Body)
	r := m.(*wire.Response)
	fmt.Println(f.ReqID, r.Status, r.Token)
	// Output:
	// hello 1
	// acquire 2: order:42 -> group 1
	// 2 SUCCESS 281474976710663
}
