// Package otlpexport sends OpenTelemetry spans to a collector over
// OTLP/HTTP: binary protobuf POSTed to the collector's /v1/traces.
//
// It is the node's exporter behind the SDK's batch span processor. It is
// written here, on the protocol's own message types
// (go.opentelemetry.io/proto/otlp), because the OpenTelemetry project's
// HTTP exporter links the whole gRPC module (some 70 packages) into every
// node and test binary for one POST; this package links nothing beyond
// the SDK, the message types and net/http.
package otlpexport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Config configures an Exporter.
type Config struct {
	// URL is where spans are POSTed: the collector's traces endpoint,
	// http(s)://host:port/v1/traces.
	URL string
	// Headers are sent with every export (an API key, say).
	Headers map[string]string
	// Client sends the exports (nil: one with a 10 s timeout).
	Client *http.Client
}

// Exporter is an sdktrace.SpanExporter that sends spans over OTLP/HTTP.
type Exporter struct {
	cfg     Config
	client  *http.Client
	stopped atomic.Bool
}

var _ sdktrace.SpanExporter = (*Exporter)(nil)

// ErrStopped is returned by an export after Shutdown.
var ErrStopped = errors.New("otlpexport: exporter shut down")

// maxTries bounds the attempts of one export that the collector answers
// with "retry later" (429, 502, 503, 504); the batch processor hands the
// next batch over meanwhile, so a lost collector costs spans, never the
// node.
const maxTries = 3

// maxBackoff bounds the wait between two attempts, a Retry-After header
// included.
const maxBackoff = 2 * time.Second

// New returns an exporter for cfg. It dials nothing: each export opens or
// reuses its connection.
func New(cfg Config) (*Exporter, error) {
	if cfg.URL == "" {
		return nil, errors.New("otlpexport: no URL")
	}
	c := cfg.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	return &Exporter{cfg: cfg, client: c}, nil
}

// ExportSpans sends spans in one request, retried while the collector
// asks to retry later, within ctx.
func (e *Exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Load() {
		return ErrStopped
	}
	if len(spans) == 0 {
		return nil
	}
	body, err := encodeRequest(spans)
	if err != nil {
		return err
	}
	backoff := 100 * time.Millisecond
	for try := 1; ; try++ {
		wait, err := e.post(ctx, body)
		if err == nil || wait < 0 || try == maxTries {
			return err
		}
		if wait == 0 {
			wait = backoff
			backoff *= 2
		}
		t := time.NewTimer(min(wait, maxBackoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (export abandoned: %w)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// post sends one request. On failure it says whether to try again: wait
// < 0 for never, 0 for after the caller's back-off, else after wait.
func (e *Exporter) post(ctx context.Context, body []byte) (wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return -1, fmt.Errorf("otlpexport: %w", err)
	}
	for k, v := range e.cfg.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("otlpexport: %w", err)
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_ = resp.Body.Close() // read what is needed; the answer decides, not the close
	switch {
	case resp.StatusCode/100 == 2:
		return 0, nil
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusBadGateway ||
		resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout:
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return wait, fmt.Errorf("otlpexport: collector answered %s", resp.Status)
	default:
		return -1, fmt.Errorf("otlpexport: collector refused the spans: %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
}

// Shutdown stops the exporter: later exports fail with ErrStopped. The
// batch processor flushes before it calls Shutdown.
func (e *Exporter) Shutdown(context.Context) error {
	e.stopped.Store(true)
	e.client.CloseIdleConnections()
	return nil
}

// encodeRequest encodes an ExportTraceServiceRequest: its only field,
// resource_spans (1), repeated. The message type itself lives in the
// collector's gRPC package, so it is written field by field here.
func encodeRequest(spans []sdktrace.ReadOnlySpan) ([]byte, error) {
	var b []byte
	for _, rs := range resourceSpans(spans) {
		m, err := proto.Marshal(rs)
		if err != nil {
			return nil, fmt.Errorf("otlpexport: encode: %w", err)
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, nil
}
