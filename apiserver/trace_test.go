package apiserver

import (
	"net/http"
	"testing"

	"connectrpc.com/connect"

	paxlockv1 "github.com/paxlock/paxlock/api/paxlock/v1"
	"github.com/paxlock/paxlock/client/wire"
)

// TestTraceparentHeader checks that a W3C traceparent header becomes the
// trace context the request carries down to the node, and that a
// missing or malformed one carries none.
func TestTraceparentHeader(t *testing.T) {
	h := http.Header{}
	if tc := traceOf(h); !tc.IsZero() {
		t.Fatalf("no header: %+v", tc)
	}
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	tc := traceOf(h)
	want := wire.TraceContext{
		TraceID: [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		Flags:   wire.TraceFlagSampled,
	}
	if tc == nil || *tc != want {
		t.Fatalf("traceparent read as %+v, want %+v", tc, want)
	}
	h.Set("traceparent", "00-not-a-trace-01")
	if tc := traceOf(h); !tc.IsZero() {
		t.Fatalf("malformed header: %+v", tc)
	}
}

// TestTracedAPIRequests checks that API calls with a traceparent header
// are served as without one (the trace context rides the in-process
// session's Acquire and Release).
func TestTracedAPIRequests(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	cl := c.client(0, testNS, testSecret)
	ctx := tctx(t)
	req := connect.NewRequest(&paxlockv1.AcquireRequest{Key: "traced-api", Owner: "alice", TtlMs: 5000})
	req.Header().Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	a, err := cl.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	rel := connect.NewRequest(&paxlockv1.ReleaseRequest{Key: "traced-api", Owner: "alice", Token: a.Msg.Token})
	rel.Header().Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if _, err := cl.Release(ctx, rel); err != nil {
		t.Fatal(err)
	}
}
