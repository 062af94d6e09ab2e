package client

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paxlock/paxlock/client/wire"
)

// tracerName is the instrumentation scope of the client's spans.
const tracerName = "github.com/paxlock/paxlock/client"

// tracerOf is the client's tracer for tp: nil when tracing is off, which
// every traced call checks first, so that an untraced call does no
// tracing work at all.
func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(tracerName, trace.WithInstrumentationVersion(Agent))
}

// startSpan starts the client span of call op ("paxlock.Lock", ...) on
// key, whose hash is hash. Call only with c.tracer set.
func (c *Client) startSpan(ctx context.Context, op, key string, hash uint64) (context.Context, trace.Span) {
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs,
		attribute.String("paxlock.namespace", c.cfg.Namespace),
		attribute.String("paxlock.key_hash", strconv.FormatUint(hash, 16)))
	if c.cfg.TraceKeys {
		attrs = append(attrs, attribute.String("paxlock.key", key))
	}
	return c.tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endSpan ends sp with the call's outcome: its error (status Error, with
// ErrLocked and the like named in paxlock.outcome) and the fencing token
// when one is held.
func endSpan(sp trace.Span, err error, token uint64) {
	if token != 0 {
		sp.SetAttributes(attribute.String("paxlock.token", strconv.FormatUint(token, 16)))
	}
	if err != nil {
		sp.SetAttributes(attribute.String("paxlock.outcome", outcomeOf(err)))
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	} else {
		sp.SetAttributes(attribute.String("paxlock.outcome", "ok"))
	}
	sp.End()
}

// outcomeOf names err's kind for a span attribute: a lock that is taken
// is an expected outcome of TryLock, not a failure of the service.
func outcomeOf(err error) string {
	switch {
	case errors.Is(err, ErrLocked):
		return "locked"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrLockLost):
		return "lost"
	case errors.Is(err, ErrNotHeld):
		return "not_held"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "error"
}

// tracing reports whether m's calls are traced (a nil *Mutex's are not:
// its calls return their error untraced).
func (m *Mutex) tracing() bool { return m != nil && m.c != nil && m.c.tracer != nil }

// traced runs call as the span op of the mutex m: directly when tracing
// is off (one nil check), else within a span that ends with its outcome.
func (m *Mutex) traced(ctx context.Context, op string, call func(context.Context) error) error {
	if !m.tracing() {
		return call(ctx)
	}
	ctx, sp := m.c.startSpan(ctx, op, m.key, m.hash)
	err := call(ctx)
	endSpan(sp, err, m.Token())
	return err
}

// injectTrace puts ctx's span context into m, the requests that carry
// one (wire.Acquire.Trace, wire.Release.Trace), so that the node's spans
// join the client's trace. It does nothing when tracing is off.
func (c *Client) injectTrace(ctx context.Context, m wire.Message) {
	if c.tracer == nil {
		return
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	tc := wire.TraceContext{TraceID: sc.TraceID(), SpanID: sc.SpanID(), Flags: byte(sc.TraceFlags())}
	switch m := m.(type) {
	case *wire.Acquire:
		m.Trace = &tc
	case *wire.Release:
		m.Trace = &tc
	}
}
