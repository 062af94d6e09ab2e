package client

import (
	"context"
	"errors"
	"strconv"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paxlock/paxlock/client/wire"
)

// spanAttr is the string attribute key of sp, and whether it has it.
func spanAttr(sp sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range sp.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsString(), true
		}
	}
	return "", false
}

// TestTraceSpans checks the client's spans: one per call, named after
// it, with the key's hash and not the key (unless TraceKeys), the
// token, and the outcome; a TryLock of a taken lock is "locked".
func TestTraceSpans(t *testing.T) {
	for _, withKeys := range []bool{false, true} {
		fc := newFakeCluster(t, 1)
		rec := tracetest.NewSpanRecorder()
		cfg := testConfig(fc.nodes[0].addr)
		cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		cfg.TraceKeys = withKeys
		c, err := New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		a, b := c.Mutex("secret-key"), c.Mutex("secret-key")
		if err := a.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.TryLock(ctx); !errors.Is(err, ErrLocked) {
			t.Fatalf("TryLock of a held lock: %v", err)
		}
		if err := a.Renew(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
		want := []struct{ name, outcome string }{{"paxlock.Lock", "ok"}, {"paxlock.TryLock", "locked"}, {"paxlock.Renew", "ok"}, {"paxlock.Unlock", "ok"}}
		got := rec.Ended()
		if len(got) != len(want) {
			t.Fatalf("%d spans, want %d", len(got), len(want))
		}
		hash := hexKeyHash(fakeNS, "secret-key")
		for i, sp := range got {
			if sp.Name() != want[i].name || sp.SpanKind() != trace.SpanKindClient {
				t.Fatalf("span %d: %s (%v), want %s", i, sp.Name(), sp.SpanKind(), want[i].name)
			}
			if o, _ := spanAttr(sp, "paxlock.outcome"); o != want[i].outcome {
				t.Errorf("%s: outcome %q, want %q", sp.Name(), o, want[i].outcome)
			}
			if h, _ := spanAttr(sp, "paxlock.key_hash"); h != hash {
				t.Errorf("%s: key hash %q, want %q", sp.Name(), h, hash)
			}
			if k, ok := spanAttr(sp, "paxlock.key"); ok != withKeys || (ok && k != "secret-key") {
				t.Errorf("%s: key attribute %q (%v) with TraceKeys %v", sp.Name(), k, ok, withKeys)
			}
		}
		if _, ok := spanAttr(got[0], "paxlock.token"); !ok {
			t.Error("the Lock span carries no token")
		}
	}
}

// hexKeyHash is the key hash as the spans carry it.
func hexKeyHash(ns, key string) string {
	return strconv.FormatUint(wire.KeyHash(ns, key), 16)
}

// TestTraceInjected checks that the span in a request's context rides
// in the Acquire and the Release, flags included.
func TestTraceInjected(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	c := &Client{tracer: tracerOf(tp)}
	ctx, sp := tp.Tracer("t").Start(context.Background(), "x")
	defer sp.End()
	sc := sp.SpanContext()
	acq, rel := &wire.Acquire{}, &wire.Release{}
	c.injectTrace(ctx, acq)
	c.injectTrace(ctx, rel)
	want := wire.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: wire.TraceFlagSampled}
	if acq.Trace == nil || rel.Trace == nil || *acq.Trace != want || *rel.Trace != want {
		t.Fatalf("injected %+v and %+v, want %+v", acq.Trace, rel.Trace, want)
	}
	untraced := &wire.Acquire{}
	c.injectTrace(context.Background(), untraced)
	if !untraced.Trace.IsZero() {
		t.Fatalf("a context without a span injected %+v", untraced.Trace)
	}
}

// TestTracingOffNoAllocs checks that with tracing off (no
// TracerProvider) what tracing adds to the TryLock path (the span gate
// and the trace injection into the Acquire) allocates nothing, and that
// the Acquire stays untraced, so its frame is what it was.
func TestTracingOffNoAllocs(t *testing.T) {
	fc := newFakeCluster(t, 1)
	c, err := New(context.Background(), testConfig(fc.nodes[0].addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.tracer != nil {
		t.Fatal("a client without a TracerProvider has a tracer")
	}
	m := c.Mutex("k")
	tp := sdktrace.NewTracerProvider()
	ctx, sp := tp.Tracer("t").Start(context.Background(), "caller's span")
	defer sp.End()
	acq := &wire.Acquire{Key: "k"}
	n := testing.AllocsPerRun(1000, func() {
		if m.tracing() {
			t.Fatal("tracing on")
		}
		c.injectTrace(ctx, acq)
	})
	if n != 0 {
		t.Fatalf("tracing off costs %v allocations per call", n)
	}
	if !acq.Trace.IsZero() {
		t.Fatalf("tracing off injected %+v", acq.Trace)
	}
}
