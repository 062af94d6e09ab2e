package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/paxlock/paxlock/client"
	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// spansOf returns the ended spans of rec in trace id whose name is name.
func spansOf(rec *tracetest.SpanRecorder, id trace.TraceID, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		if sp.SpanContext().TraceID() == id && sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// TestTracingBlockingAcquireEndToEnd checks that one blocking acquire
// yields one trace across the client and the node: the client's Lock span
// is the parent of the master's received span, whose children are the
// wait (queued), the grant's Paxos command (proposed, committed) and the
// grant, which links to the release that woke it.
func TestTracingBlockingAcquireEndToEnd(t *testing.T) {
	t.Parallel()
	nodeRec := tracetest.NewSpanRecorder()
	nodeTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(nodeRec))
	clientRec := tracetest.NewSpanRecorder()
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientRec))
	tc := startClusterWith(t, 3, func(c *Config) { c.TracerProvider = nodeTP })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	newClient := func() *client.Client {
		c, err := client.New(ctx, client.Config{Registry: tc.clientAddrs(), Namespace: "ns", Secret: "s3cret", Logger: testLogger(), MaxRetries: testMaxRetries, TracerProvider: clientTP})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	holder, waiter := newClient().Mutex("traced"), newClient().Mutex("traced")
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- waiter.Lock(ctx) }()
	// The waiter is queued on the master once its queued span started.
	waitFor(t, "the waiter queued", func() bool {
		for _, sp := range nodeRec.Started() {
			if sp.Name() == "paxlock.queued" {
				return true
			}
		}
		return false
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var lock sdktrace.ReadOnlySpan
	waitFor(t, "the waiter's Lock span", func() bool {
		for _, sp := range clientRec.Ended() {
			if sp.Name() == "paxlock.Lock" && sp.SpanContext().TraceID() != firstTrace(clientRec, "paxlock.Lock") {
				lock = sp
				return true
			}
		}
		return false
	})
	id := lock.SpanContext().TraceID()
	waitFor(t, "the node's spans of the wait", func() bool {
		return len(spansOf(nodeRec, id, "paxlock.granted")) > 0
	})
	var received sdktrace.ReadOnlySpan
	for _, sp := range spansOf(nodeRec, id, "paxlock.received") {
		if sp.Parent().SpanID() == lock.SpanContext().SpanID() && attr(sp, "paxlock.status") == wire.StatusLockWait.String() {
			received = sp
		}
	}
	if received == nil {
		t.Fatalf("no received span answering LOCK_WAIT under the client's Lock span %v", lock.SpanContext().SpanID())
	}
	for _, name := range []string{"paxlock.queued", "paxlock.proposed", "paxlock.committed", "paxlock.granted"} {
		sp := childOf(spansOf(nodeRec, id, name), received)
		if sp == nil {
			t.Fatalf("no %s span under the received span", name)
		}
		if name == "paxlock.granted" {
			checkWokenBy(t, sp, clientRec)
		}
	}
}

// childOf is the first of sps whose parent is parent, or nil.
func childOf(sps []sdktrace.ReadOnlySpan, parent sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	for _, sp := range sps {
		if sp.Parent().SpanID() == parent.SpanContext().SpanID() {
			return sp
		}
	}
	return nil
}

// firstTrace is the trace id of the first ended span named name.
func firstTrace(rec *tracetest.SpanRecorder, name string) trace.TraceID {
	for _, sp := range rec.Ended() {
		if sp.Name() == name {
			return sp.SpanContext().TraceID()
		}
	}
	return trace.TraceID{}
}

// checkWokenBy checks that the granted span links to the release's
// received span, in the trace of the holder's Unlock.
func checkWokenBy(t *testing.T, granted sdktrace.ReadOnlySpan, clientRec *tracetest.SpanRecorder) {
	t.Helper()
	unlock := firstTrace(clientRec, "paxlock.Unlock")
	for _, l := range granted.Links() {
		if l.SpanContext.TraceID() == unlock {
			return
		}
	}
	t.Fatalf("granted span's links %+v name no span of the Unlock's trace %v", granted.Links(), unlock)
}

// attr is the string attribute key of sp ("" if none).
func attr(sp sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range sp.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}

// TestTracingOffNoRequestWork checks that with tracing off the request
// path starts nothing: Server.tracing is nil, so a request gets no
// Trace, and a traced frame decodes with no allocation beyond an
// untraced one's; wire.TestTraceDecodeAllocs checks that an untraced
// frame decodes with no allocation for the field.
func TestTracingOffNoRequestWork(t *testing.T) {
	nt, err := newTracing(Config{NodeID: 1})
	if err != nil || nt != nil {
		t.Fatalf("tracing off: %v, %v", nt, err)
	}
	on := &nodeTracing{tracer: sdktrace.NewTracerProvider().Tracer("t")}
	r := &group.Request{Namespace: "ns", Hash: 1}
	if gt := on.startRequest(&wire.Acquire{Key: "k"}, r, "Acquire"); gt != nil {
		t.Fatal("an untraced request with sample_ratio 0 was traced")
	}
	unsampled := &wire.Acquire{Key: "k", Trace: &wire.TraceContext{TraceID: [16]byte{1}, SpanID: [8]byte{1}}}
	if gt := on.startRequest(unsampled, r, "Acquire"); gt != nil {
		t.Fatal("a request the client did not sample was traced")
	}
	if n := testing.AllocsPerRun(100, func() { _ = on.startRequest(unsampled, r, "Acquire") }); n != 0 {
		t.Fatalf("an unsampled request costs %v allocations", n)
	}
}

func TestTracingConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		t  Tracing
		ok bool
	}{
		{Tracing{}, true},
		{Tracing{OTLPEndpoint: "collector:4318", SampleRatio: 0.1, Insecure: true, Headers: map[string]string{"x-api-key": "k"}}, true},
		{Tracing{OTLPEndpoint: "https://collector.example/v1/traces"}, true},
		{Tracing{OTLPEndpoint: "collector"}, false},
		{Tracing{OTLPEndpoint: "ftp://collector:21"}, false},
		{Tracing{OTLPEndpoint: "https://collector:4318", Insecure: true}, false},
		{Tracing{OTLPEndpoint: "collector:4318", SampleRatio: 1.5}, false},
		{Tracing{SampleRatio: 0.5}, false},
	} {
		if err := tc.t.validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: validate = %v, want ok %v", tc.t, err, tc.ok)
		}
	}
}

// TestTracingExporterShutdown checks that a node with an OTLP endpoint
// builds its exporter and that stopping it is bounded, collector or not.
func TestTracingExporterShutdown(t *testing.T) {
	nt, err := newTracing(Config{NodeID: 1, Tracing: Tracing{OTLPEndpoint: "127.0.0.1:1", Insecure: true, SampleRatio: 1}})
	if err != nil || nt == nil {
		t.Fatalf("newTracing: %v, %v", nt, err)
	}
	_, sp := nt.tracer.Start(context.Background(), "x")
	sp.End()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = nt.stop(ctx)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("stop: %v", err) // a refused export is reported, not fatal
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("stop took %v", d)
	}
}

// TestTracingHeadersRedacted checks that the logged configuration hides
// the exporter's header values (API keys).
func TestTracingHeadersRedacted(t *testing.T) {
	cfg := Config{Tracing: Tracing{OTLPEndpoint: "collector:4318", Headers: map[string]string{"x-api-key": "hunter2"}}}
	raw, _ := cfg.LogValue().Any().(json.RawMessage)
	out := string(raw)
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "x-api-key") {
		t.Fatalf("logged config: %s", out)
	}
	if cfg.Tracing.Headers["x-api-key"] != "hunter2" {
		t.Fatal("redacting changed the configuration")
	}
}

// TestTracingExportURL: where each form of otlp_endpoint sends spans.
func TestTracingExportURL(t *testing.T) {
	for _, c := range []struct {
		t    Tracing
		want string
	}{
		{Tracing{OTLPEndpoint: "collector:4318"}, "https://collector:4318/v1/traces"},
		{Tracing{OTLPEndpoint: "collector:4318", Insecure: true}, "http://collector:4318/v1/traces"},
		{Tracing{OTLPEndpoint: "http://collector:4318"}, "http://collector:4318/v1/traces"},
		{Tracing{OTLPEndpoint: "https://collector.example/custom/path"}, "https://collector.example/custom/path"},
	} {
		if got := c.t.exportURL(); got != c.want {
			t.Errorf("%+v: %s, want %s", c.t, got, c.want)
		}
	}
}
