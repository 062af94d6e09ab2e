package wire

import (
	"errors"
	"testing"
)

func TestTraceContextRoundTrip(t *testing.T) {
	tc := TraceContext{TraceID: [16]byte{9, 8, 7}, SpanID: [8]byte{1}, Flags: TraceFlagSampled}
	for _, m := range []Message{
		&Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1, Trace: tc},
		&Release{Key: "k", Owner: Owner{1, 2}, Token: 3, Trace: tc},
		&Release{Key: "k", Owner: Owner{1, 2}, Token: 3, PassOnID: 4, PassOnLockDelayMs: 5, Trace: tc},
	} {
		b, err := AppendBody(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		var got Message = &Acquire{}
		if _, ok := m.(*Release); ok {
			got = &Release{}
		}
		if err := DecodeInto(b, got); err != nil {
			t.Fatal(err)
		}
		var gt TraceContext
		switch g := got.(type) {
		case *Acquire:
			gt = g.Trace
		case *Release:
			gt = g.Trace
		}
		if gt != tc || !gt.Sampled() {
			t.Fatalf("%T: trace %+v, want %+v", m, gt, tc)
		}
	}
}

func TestTraceContextBadLength(t *testing.T) {
	body := rawArray(t, "k", 1, 2, 0, 0, 1, 0, 0, 0, 0, "", 0, 0, 0, 0, []byte{1, 2, 3})
	var got Acquire
	if err := DecodeInto(body, &got); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a 3-byte trace context decoded: %v", err)
	}
}

// TestTraceDecodeAllocs checks that the trace context costs a decoder no
// allocation: it is read into a fixed array.
func TestTraceDecodeAllocs(t *testing.T) {
	body, err := AppendBody(nil, &Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1, Trace: TraceContext{TraceID: [16]byte{1}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := AppendBody(nil, &Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	var m Acquire
	c := NewCodec()
	traced := testing.AllocsPerRun(100, func() { _ = c.DecodeInto(body, &m) })
	untraced := testing.AllocsPerRun(100, func() { _ = c.DecodeInto(plain, &m) })
	if traced > untraced {
		t.Fatalf("decoding a trace context allocates: %.1f allocs traced, %.1f untraced", traced, untraced)
	}
}
