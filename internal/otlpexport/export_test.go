package otlpexport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// decodeRequest reads an ExportTraceServiceRequest's resource spans.
func decodeRequest(t *testing.T, b []byte) []*tracepb.ResourceSpans {
	t.Helper()
	var out []*tracepb.ResourceSpans
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			t.Fatalf("field %d type %d (%d): not resource_spans", num, typ, n)
		}
		b = b[n:]
		m, n := protowire.ConsumeBytes(b)
		if n < 0 {
			t.Fatal("truncated resource_spans")
		}
		b = b[n:]
		rs := &tracepb.ResourceSpans{}
		if err := proto.Unmarshal(m, rs); err != nil {
			t.Fatal(err)
		}
		out = append(out, rs)
	}
	return out
}

// collector is a fake OTLP/HTTP collector: it answers the first
// failFirst requests with code, then 200, and keeps what it got.
type collector struct {
	mu        sync.Mutex
	bodies    [][]byte
	headers   []http.Header
	failFirst int32
	code      int
	calls     atomic.Int32
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	b, _ := io.ReadAll(r.Body)
	if c.calls.Add(1) <= c.failFirst {
		w.Header().Set("Retry-After", "0")
		http.Error(w, "later", c.code)
		return
	}
	c.mu.Lock()
	c.bodies = append(c.bodies, b)
	c.headers = append(c.headers, r.Header.Clone())
	c.mu.Unlock()
}

// spans records a parent and a child span, with attributes, an event, a
// link and an error status, through a provider exporting to exp.
func spans(t *testing.T, exp sdktrace.SpanExporter) {
	t.Helper()
	res := resource.NewSchemaless(attribute.String("service.name", "paxlockd"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	tr := tp.Tracer("scope-a")
	ctx, parent := tr.Start(context.Background(), "parent", trace.WithSpanKind(trace.SpanKindServer))
	link := trace.SpanContextFromContext(ctx)
	_, child := tr.Start(ctx, "child", trace.WithLinks(trace.Link{SpanContext: link, Attributes: []attribute.KeyValue{attribute.Bool("l", true)}}))
	child.SetAttributes(attribute.String("paxlock.key", "k"), attribute.Int64("n", 7), attribute.Float64("f", 1.5),
		attribute.StringSlice("ss", []string{"a", "b"}))
	child.AddEvent("granted", trace.WithAttributes(attribute.Int("waiters", 2)))
	child.SetStatus(codes.Error, "lost")
	child.End()
	parent.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestExportSpans(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	exp, err := New(Config{URL: srv.URL + "/v1/traces", Headers: map[string]string{"Api-Key": "k1"}})
	if err != nil {
		t.Fatal(err)
	}
	spans(t, exp)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bodies) != 2 {
		t.Fatalf("%d exports, want 2 (one per ended span, WithSyncer)", len(c.bodies))
	}
	if got := c.headers[0].Get("Api-Key"); got != "k1" {
		t.Errorf("header Api-Key %q", got)
	}
	child := decodeRequest(t, c.bodies[0])
	parent := decodeRequest(t, c.bodies[1])
	if len(child) != 1 || len(child[0].ScopeSpans) != 1 || len(child[0].ScopeSpans[0].Spans) != 1 {
		t.Fatalf("child export: %v", child)
	}
	rs := child[0]
	if a := rs.Resource.Attributes; len(a) != 1 || a[0].Key != "service.name" || a[0].Value.GetStringValue() != "paxlockd" {
		t.Errorf("resource %v", a)
	}
	if sc := rs.ScopeSpans[0].Scope; sc.Name != "scope-a" {
		t.Errorf("scope %v", sc)
	}
	cs, ps := rs.ScopeSpans[0].Spans[0], parent[0].ScopeSpans[0].Spans[0]
	if cs.Name != "child" || ps.Name != "parent" || ps.Kind != tracepb.Span_SPAN_KIND_SERVER || cs.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("names/kinds: %s %v, %s %v", cs.Name, cs.Kind, ps.Name, ps.Kind)
	}
	if string(cs.TraceId) != string(ps.TraceId) || string(cs.ParentSpanId) != string(ps.SpanId) || len(ps.ParentSpanId) != 0 {
		t.Errorf("parentage: child trace %x parent %x; parent trace %x span %x", cs.TraceId, cs.ParentSpanId, ps.TraceId, ps.SpanId)
	}
	if cs.Flags&0xff != 1 || cs.Flags&flagHasIsRemote == 0 || cs.Flags&flagIsRemote != 0 {
		t.Errorf("child flags %#x: want sampled, parent known local", cs.Flags)
	}
	if cs.StartTimeUnixNano == 0 || cs.EndTimeUnixNano < cs.StartTimeUnixNano {
		t.Errorf("times %d..%d", cs.StartTimeUnixNano, cs.EndTimeUnixNano)
	}
	attrs := map[string]string{}
	for _, kv := range cs.Attributes {
		attrs[kv.Key] = kv.Value.String()
	}
	if len(attrs) != 4 || cs.Attributes == nil {
		t.Errorf("attributes %v", attrs)
	}
	for _, kv := range cs.Attributes {
		switch kv.Key {
		case "paxlock.key":
			if kv.Value.GetStringValue() != "k" {
				t.Errorf("%s = %v", kv.Key, kv.Value)
			}
		case "n":
			if kv.Value.GetIntValue() != 7 {
				t.Errorf("%s = %v", kv.Key, kv.Value)
			}
		case "f":
			if kv.Value.GetDoubleValue() != 1.5 {
				t.Errorf("%s = %v", kv.Key, kv.Value)
			}
		case "ss":
			if v := kv.Value.GetArrayValue().GetValues(); len(v) != 2 || v[1].GetStringValue() != "b" {
				t.Errorf("%s = %v", kv.Key, kv.Value)
			}
		}
	}
	if len(cs.Events) != 1 || cs.Events[0].Name != "granted" || cs.Events[0].Attributes[0].Value.GetIntValue() != 2 {
		t.Errorf("events %v", cs.Events)
	}
	if len(cs.Links) != 1 || string(cs.Links[0].SpanId) != string(ps.SpanId) || !cs.Links[0].Attributes[0].Value.GetBoolValue() {
		t.Errorf("links %v", cs.Links)
	}
	if cs.Status.Code != tracepb.Status_STATUS_CODE_ERROR || cs.Status.Message != "lost" || ps.Status.Code != tracepb.Status_STATUS_CODE_UNSET {
		t.Errorf("status %v / %v", cs.Status, ps.Status)
	}
}

// TestExportRetries: a collector that asks to retry later gets the same
// spans again, at most maxTries times; one that refuses them is not
// asked again.
func TestExportRetries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      int
		failFirst int32
		wantErr   bool
		wantCalls int32
	}{
		{"503 then 200", http.StatusServiceUnavailable, 2, false, 3},
		{"429 forever", http.StatusTooManyRequests, 100, true, maxTries},
		{"400 is final", http.StatusBadRequest, 100, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &collector{code: tc.code, failFirst: tc.failFirst}
			srv := httptest.NewServer(c)
			defer srv.Close()
			exp, _ := New(Config{URL: srv.URL + "/v1/traces"})
			var got []sdktrace.ReadOnlySpan
			rec := sdktrace.NewSimpleSpanProcessor(exporterFunc(func(s []sdktrace.ReadOnlySpan) { got = append(got, s...) }))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			_, sp := tp.Tracer("t").Start(context.Background(), "s")
			sp.End()
			err := exp.ExportSpans(context.Background(), got)
			if (err != nil) != tc.wantErr || c.calls.Load() != tc.wantCalls {
				t.Fatalf("err %v, %d calls; want error %v, %d calls", err, c.calls.Load(), tc.wantErr, tc.wantCalls)
			}
		})
	}
}

// TestExportAfterShutdown: a stopped exporter sends nothing.
func TestExportAfterShutdown(t *testing.T) {
	c := &collector{}
	srv := httptest.NewServer(c)
	defer srv.Close()
	exp, _ := New(Config{URL: srv.URL + "/v1/traces"})
	_ = exp.Shutdown(context.Background())
	var got []sdktrace.ReadOnlySpan
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(exporterFunc(func(s []sdktrace.ReadOnlySpan) { got = append(got, s...) }))))
	_, sp := tp.Tracer("t").Start(context.Background(), "s")
	sp.End()
	if err := exp.ExportSpans(context.Background(), got); !errors.Is(err, ErrStopped) || c.calls.Load() != 0 {
		t.Fatalf("after shutdown: %v, %d calls", err, c.calls.Load())
	}
}

// TestExportCancelled: an export asked to retry later ends with its
// context instead of waiting.
func TestExportCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the caller gives up while the collector answers
		w.Header().Set("Retry-After", "60")
		http.Error(w, "later", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	exp, _ := New(Config{URL: srv.URL + "/v1/traces"})
	var got []sdktrace.ReadOnlySpan
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sdktrace.NewSimpleSpanProcessor(exporterFunc(func(s []sdktrace.ReadOnlySpan) { got = append(got, s...) }))))
	_, sp := tp.Tracer("t").Start(context.Background(), "s")
	sp.End()
	start := time.Now()
	if err := exp.ExportSpans(ctx, got); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled export: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("a cancelled export took %v", d)
	}
}

// exporterFunc collects spans for the tests.
type exporterFunc func([]sdktrace.ReadOnlySpan)

func (f exporterFunc) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	f(s)
	return nil
}
func (exporterFunc) Shutdown(context.Context) error { return nil }
