package apiserver

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/paxlock/paxlock/client/wire"
)

// traceHeader is the W3C Trace Context header an API caller sends to
// have the node's spans join its trace.
const traceHeader = "traceparent"

// traceOf is the trace context of an API request's traceparent header
// (W3C Trace Context), to carry down the in-process session like a
// native client's (wire.Acquire.Trace); zero when the header is absent or
// malformed (nil). A request without the header costs one header lookup.
func traceOf(h http.Header) *wire.TraceContext {
	if h.Get(traceHeader) == "" {
		return nil
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h))
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return &wire.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
}
