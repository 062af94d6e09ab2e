package server

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/paxlock/paxlock/client/wire"
	"github.com/paxlock/paxlock/group"
)

// traceContextOf is the trace context a request carries (zero if none).
func traceContextOf(m wire.Message) wire.TraceContext {
	var tc *wire.TraceContext
	switch m := m.(type) {
	case *wire.Acquire:
		tc = m.Trace
	case *wire.Release:
		tc = m.Trace
	}
	if tc == nil {
		return wire.TraceContext{}
	}
	return *tc
}

// remoteParent is ctx with tc as its remote parent span (ctx itself when
// tc is zero).
func remoteParent(ctx context.Context, tc wire.TraceContext) context.Context {
	if tc.IsZero() {
		return ctx
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tc.TraceID,
		SpanID:     tc.SpanID,
		TraceFlags: trace.TraceFlags(tc.Flags),
		Remote:     true,
	})
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// wants reports whether a request carrying tc is traced: a client's
// sampled flag decides for its own requests, SampleRatio (through the
// sampler) for the others; a ratio of 0 skips them before any work.
func (nt *nodeTracing) wants(tc wire.TraceContext) bool {
	if tc.IsZero() {
		return nt.ratio > 0
	}
	return tc.Sampled()
}

// reqTrace is the node's spans for one request: received (from the
// frame to the answer), queued (a blocking acquire's wait), proposed
// (its command in Paxos), and the instants committed and granted. Its
// mark runs on the worker that serves the request, one stage at a time.
type reqTrace struct {
	nt       *nodeTracing
	ctx      context.Context // carries the received span
	received trace.Span
	queued   trace.Span
	proposed trace.Span
	g        group.Trace
}

// startRequest starts the received span of r (decoded from m) and
// returns the trace to follow it by, or nil when the request is not
// traced.
func (nt *nodeTracing) startRequest(m wire.Message, r *group.Request, op string) *group.Trace {
	tc := traceContextOf(m)
	if !nt.wants(tc) {
		return nil
	}
	ctx, sp := nt.tracer.Start(remoteParent(context.Background(), tc), "paxlock.received",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(nt.node, attribute.String("paxlock.op", op),
			attribute.String("paxlock.namespace", r.Namespace),
			attribute.String("paxlock.key_hash", hexHash(r.Hash))))
	if !sp.IsRecording() {
		sp.End()
		return nil
	}
	rt := &reqTrace{nt: nt, ctx: ctx, received: sp}
	rt.g = group.Trace{Mark: rt.mark, Ref: sp.SpanContext()}
	return &rt.g
}

// relayed records a request this node forwards to its group's master as
// one span, paxlock.relay: the master's spans join the client's trace
// from the frame, which travels unchanged.
func (nt *nodeTracing) relayed(m wire.Message, r *group.Request, op string, master uint32) {
	tc := traceContextOf(m)
	if !nt.wants(tc) {
		return
	}
	_, sp := nt.tracer.Start(remoteParent(context.Background(), tc), "paxlock.relay",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(nt.node, attribute.String("paxlock.op", op),
			attribute.String("paxlock.namespace", r.Namespace),
			attribute.String("paxlock.key_hash", hexHash(r.Hash)),
			attribute.Int64("paxlock.relay_to", int64(master))))
	sp.End()
}

// hexHash is a key hash as the spans carry it (as the client's do).
func hexHash(h uint64) string { return strconv.FormatUint(h, 16) }

// mark records stage s (see group.Trace.Mark).
func (rt *reqTrace) mark(s group.Stage, st wire.Status, by *group.Trace) {
	tr := rt.nt.tracer
	status := attribute.String("paxlock.status", st.String())
	switch s {
	case group.StageQueued:
		_, rt.queued = tr.Start(rt.ctx, "paxlock.queued", trace.WithAttributes(rt.nt.node))
	case group.StageProposed:
		if rt.proposed != nil {
			rt.proposed.End()
		}
		_, rt.proposed = tr.Start(rt.ctx, "paxlock.proposed", trace.WithAttributes(rt.nt.node))
	case group.StageCommitted:
		if rt.proposed != nil {
			rt.proposed.SetAttributes(status)
			rt.proposed.End()
			rt.proposed = nil
		}
		_, sp := tr.Start(rt.ctx, "paxlock.committed", trace.WithAttributes(rt.nt.node, status))
		sp.End()
	case group.StageGranted:
		if rt.queued != nil {
			rt.queued.SetAttributes(status)
			rt.queued.End()
			rt.queued = nil
		}
		opts := []trace.SpanStartOption{trace.WithAttributes(rt.nt.node, status)}
		if by != nil {
			if sc, ok := by.Ref.(trace.SpanContext); ok {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("paxlock.link", "woken_by")}}))
			}
		}
		_, sp := tr.Start(rt.ctx, "paxlock.granted", opts...)
		sp.End()
	case group.StageResponded:
		rt.received.SetAttributes(status)
		if st == wire.StatusError || st == wire.StatusBadRequest {
			rt.received.SetStatus(codes.Error, st.String())
		}
		rt.received.End()
	}
}
