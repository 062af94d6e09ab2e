package wire

import (
	"errors"
	"testing"
	"unsafe"
)

func TestTraceContextRoundTrip(t *testing.T) {
	tc := TraceContext{TraceID: [16]byte{9, 8, 7}, SpanID: [8]byte{1}, Flags: TraceFlagSampled}
	for _, m := range []Message{
		&Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1, Trace: &tc},
		&Release{Key: "k", Owner: Owner{1, 2}, Token: 3, Trace: &tc},
		&Release{Key: "k", Owner: Owner{1, 2}, Token: 3, PassOnID: 4, PassOnLockDelayMs: 5, Trace: &tc},
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
		var gt *TraceContext
		switch g := got.(type) {
		case *Acquire:
			gt = g.Trace
		case *Release:
			gt = g.Trace
		}
		if gt == nil || *gt != tc || !gt.Sampled() {
			t.Fatalf("%T: trace %+v, want %+v", m, gt, tc)
		}
	}
}

// TestTraceContextOmitted checks that a nil or zero trace context leaves
// the frame as an untraced one.
func TestTraceContextOmitted(t *testing.T) {
	plain, err := AppendBody(nil, &Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	zero, err := AppendBody(nil, &Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1, Trace: &TraceContext{}})
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != string(zero) {
		t.Fatalf("a zero trace context changed the body: %x, want %x", zero, plain)
	}
}

func TestTraceContextBadLength(t *testing.T) {
	body := rawArray(t, "k", 1, 2, 0, 0, 1, 0, 0, 0, 0, "", 0, 0, 0, 0, []byte{1, 2, 3})
	var got Acquire
	if err := DecodeInto(body, &got); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a 3-byte trace context decoded: %v", err)
	}
}

// TestTraceDecodeAllocs checks that an untraced Acquire decodes with no
// allocation (the field is a nil pointer), and a traced one with one, the
// trace context itself.
func TestTraceDecodeAllocs(t *testing.T) {
	body, err := AppendBody(nil, &Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1, Trace: &TraceContext{TraceID: [16]byte{1}}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := AppendBody(nil, &Acquire{Key: "k", Owner: Owner{1, 2}, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	var m Acquire
	c := NewCodec()
	untraced := testing.AllocsPerRun(100, func() { _ = c.DecodeInto(plain, &m) })
	traced := testing.AllocsPerRun(100, func() { _ = c.DecodeInto(body, &m) })
	if untraced != 0 || traced > 1 {
		t.Fatalf("decoding allocates %.1f untraced, %.1f traced; want 0 and at most 1", untraced, traced)
	}
}

// TestTraceKeepsSizeClasses checks that the Trace pointer keeps Acquire
// and Release in the 96-byte allocation size class they had without it,
// so that untraced requests cost no more memory.
func TestTraceKeepsSizeClasses(t *testing.T) {
	if a, r := unsafe.Sizeof(Acquire{}), unsafe.Sizeof(Release{}); a > 96 || r > 96 {
		t.Fatalf("Acquire %d bytes, Release %d: over the 96-byte size class", a, r)
	}
}
