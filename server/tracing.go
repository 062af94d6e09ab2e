package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/paxlock/paxlock/internal/otlpexport"
)

// Tracing configures the node's OpenTelemetry spans (the config file's
// "tracing" section). Tracing is off unless OTLPEndpoint is set (or
// Config.TracerProvider is): a request then costs one nil check.
type Tracing struct {
	// OTLPEndpoint is the OTLP/HTTP collector spans are exported to:
	// host:port (the path /v1/traces, HTTPS unless Insecure), or a full
	// http:// or https:// URL. Empty: tracing off.
	OTLPEndpoint string `json:"otlp_endpoint,omitempty"`
	// SampleRatio is the fraction, 0 to 1, of requests that carry no
	// trace context that the node traces on its own (0, the default:
	// none). A request that carries one (a traced client's) is traced
	// when, and only when, the client sampled it.
	SampleRatio float64 `json:"sample_ratio,omitempty"`
	// Insecure exports over plain HTTP (host:port endpoints only).
	Insecure bool `json:"insecure,omitempty"`
	// Headers are sent with every export (an API key, say).
	Headers map[string]string `json:"headers,omitempty"`
}

// redacted is t with its header values replaced by Redacted, for logs.
func (t Tracing) redacted() Tracing {
	if len(t.Headers) == 0 {
		return t
	}
	h := make(map[string]string, len(t.Headers))
	for k := range t.Headers {
		h[k] = Redacted
	}
	t.Headers = h
	return t
}

// tracingFlushTimeout bounds how long shutdown waits for the last spans
// to be exported.
const tracingFlushTimeout = 5 * time.Second

// validate checks the section.
func (t Tracing) validate() error {
	var errs []error
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		errs = append(errs, fmt.Errorf("tracing.sample_ratio: %v is not within 0..1", t.SampleRatio))
	}
	if t.OTLPEndpoint == "" {
		if t.SampleRatio != 0 || t.Insecure || len(t.Headers) > 0 {
			errs = append(errs, errors.New("tracing: otlp_endpoint must be set for its other settings to apply"))
		}
		return errors.Join(errs...)
	}
	if isURL(t.OTLPEndpoint) {
		u, err := url.Parse(t.OTLPEndpoint)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("tracing.otlp_endpoint: %w", err))
		case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
			errs = append(errs, fmt.Errorf("tracing.otlp_endpoint: %q is not an http(s) URL", t.OTLPEndpoint))
		case t.Insecure:
			errs = append(errs, errors.New("tracing.insecure: applies to host:port endpoints; a URL names its scheme"))
		}
	} else if _, _, err := net.SplitHostPort(t.OTLPEndpoint); err != nil {
		errs = append(errs, fmt.Errorf("tracing.otlp_endpoint: %w", err))
	}
	return errors.Join(errs...)
}

// exportURL is where spans are POSTed: a URL endpoint as given (its
// path, or /v1/traces when it has none), a host:port one at /v1/traces
// over HTTPS, or HTTP when Insecure.
func (t Tracing) exportURL() string {
	if isURL(t.OTLPEndpoint) {
		if u, err := url.Parse(t.OTLPEndpoint); err == nil && (u.Path == "" || u.Path == "/") {
			u.Path = "/v1/traces"
			return u.String()
		}
		return t.OTLPEndpoint
	}
	scheme := "https"
	if t.Insecure {
		scheme = "http"
	}
	return scheme + "://" + t.OTLPEndpoint + "/v1/traces"
}

// isURL reports whether an otlp_endpoint is a URL rather than host:port.
func isURL(s string) bool { return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://") }

// nodeTracing is the node's tracer and what to shut down with the node;
// Server.tracing is nil when tracing is off.
type nodeTracing struct {
	tracer trace.Tracer
	// ratio is Tracing.SampleRatio: 0 skips untraced requests before
	// any span is started.
	ratio float64
	node  attribute.KeyValue
	// shutdown flushes and stops the exporter; nil for a provider the
	// embedder gave (Config.TracerProvider), which is theirs to stop.
	shutdown func(context.Context) error
}

// newTracing sets up the node's tracing from cfg, or returns nil when it
// is off. The exporter is an OTLP/HTTP one behind a batch span processor,
// sampling parent-based: a client's sampled flag decides for its
// requests, SampleRatio for the rest.
func newTracing(cfg Config) (*nodeTracing, error) {
	t := cfg.Tracing
	nt := &nodeTracing{ratio: t.SampleRatio, node: attribute.String("paxlock.node", strconv.FormatUint(uint64(cfg.NodeID), 10))}
	if tp := cfg.TracerProvider; tp != nil {
		nt.tracer = tp.Tracer(tracerName)
		return nt, nil
	}
	if t.OTLPEndpoint == "" {
		return nil, nil
	}
	exp, err := otlpexport.New(otlpexport.Config{URL: t.exportURL(), Headers: t.Headers})
	if err != nil {
		return nil, fmt.Errorf("server: tracing exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", "paxlockd"),
		attribute.String("service.instance.id", strconv.FormatUint(uint64(cfg.NodeID), 10)))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.SampleRatio))),
	)
	nt.tracer = tp.Tracer(tracerName)
	nt.shutdown = tp.Shutdown
	return nt, nil
}

// tracerName is the instrumentation scope of the node's spans.
const tracerName = "github.com/paxlock/paxlock/server"

// stop flushes the spans not yet exported and stops the exporter, within
// ctx and at most tracingFlushTimeout.
func (nt *nodeTracing) stop(ctx context.Context) error {
	if nt == nil || nt.shutdown == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, tracingFlushTimeout)
	defer cancel()
	if err := nt.shutdown(ctx); err != nil {
		return fmt.Errorf("server: tracing shutdown: %w", err)
	}
	return nil
}
