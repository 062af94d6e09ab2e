package otlpexport

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// resourceSpans groups spans by their resource, then by their
// instrumentation scope, in the order they first appear.
func resourceSpans(spans []sdktrace.ReadOnlySpan) []*tracepb.ResourceSpans {
	type scopeKey struct {
		res   *resource.Resource
		name  string
		ver   string
		url   string
		attrs attribute.Distinct
	}
	var out []*tracepb.ResourceSpans
	byRes := map[*resource.Resource]*tracepb.ResourceSpans{}
	byScope := map[scopeKey]*tracepb.ScopeSpans{}
	for _, s := range spans {
		res := s.Resource()
		rs := byRes[res]
		if rs == nil {
			rs = &tracepb.ResourceSpans{Resource: resourceOf(res), SchemaUrl: res.SchemaURL()}
			byRes[res] = rs
			out = append(out, rs)
		}
		sc := s.InstrumentationScope()
		k := scopeKey{res, sc.Name, sc.Version, sc.SchemaURL, sc.Attributes.Equivalent()}
		ss := byScope[k]
		if ss == nil {
			ss = &tracepb.ScopeSpans{Scope: scopeOf(sc), SchemaUrl: sc.SchemaURL}
			byScope[k] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanOf(s))
	}
	return out
}

func resourceOf(r *resource.Resource) *resourcepb.Resource {
	if r == nil {
		return &resourcepb.Resource{}
	}
	return &resourcepb.Resource{Attributes: keyValues(r.Attributes())}
}

func scopeOf(sc instrumentation.Scope) *commonpb.InstrumentationScope {
	return &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version, Attributes: keyValues(sc.Attributes.ToSlice())}
}

// Span flags of OTLP (trace.proto's SpanFlags): the W3C trace flags in
// the low byte, and whether the parent or link is remote.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

func remoteFlags(sc trace.SpanContext) uint32 {
	f := uint32(sc.TraceFlags()) | flagHasIsRemote
	if sc.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

func spanOf(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:                tid[:],
		SpanId:                 sid[:],
		TraceState:             sc.TraceState().String(),
		Flags:                  uint32(sc.TraceFlags()),
		Name:                   s.Name(),
		Kind:                   tracepb.Span_SpanKind(s.SpanKind()), // the same numbers: unspecified, internal, server, client, producer, consumer
		StartTimeUnixNano:      unixNano(s.StartTime().UnixNano()),
		EndTimeUnixNano:        unixNano(s.EndTime().UnixNano()),
		Attributes:             keyValues(s.Attributes()),
		DroppedAttributesCount: uint32(max(s.DroppedAttributes(), 0)),
		DroppedEventsCount:     uint32(max(s.DroppedEvents(), 0)),
		DroppedLinksCount:      uint32(max(s.DroppedLinks(), 0)),
		Status:                 statusOf(s.Status()),
	}
	if par := s.Parent(); par.IsValid() {
		psid := par.SpanID()
		p.ParentSpanId = psid[:]
		p.Flags = uint32(sc.TraceFlags()) | remoteFlags(par)&^0xff // the span's own trace flags, the parent's remoteness
	}
	for _, ev := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{
			TimeUnixNano: unixNano(ev.Time.UnixNano()), Name: ev.Name,
			Attributes: keyValues(ev.Attributes), DroppedAttributesCount: uint32(max(ev.DroppedAttributeCount, 0)),
		})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{
			TraceId: ltid[:], SpanId: lsid[:], TraceState: l.SpanContext.TraceState().String(),
			Attributes: keyValues(l.Attributes), DroppedAttributesCount: uint32(max(l.DroppedAttributeCount, 0)),
			Flags: remoteFlags(l.SpanContext),
		})
	}
	return p
}

// unixNano is a time's nanoseconds for OTLP, 0 for times before 1970
// (a zero time.Time among them: a span not ended).
func unixNano(n int64) uint64 { return uint64(max(n, 0)) }

func statusOf(st sdktrace.Status) *tracepb.Status {
	switch st.Code {
	case codes.Error:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: st.Description}
	case codes.Ok:
		return &tracepb.Status{Code: tracepb.Status_STATUS_CODE_OK}
	}
	return &tracepb.Status{}
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), func(b bool) *commonpb.AnyValue { return anyValue(attribute.BoolValue(b)) })
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), func(i int64) *commonpb.AnyValue { return anyValue(attribute.Int64Value(i)) })
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), func(f float64) *commonpb.AnyValue { return anyValue(attribute.Float64Value(f)) })
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), func(s string) *commonpb.AnyValue { return anyValue(attribute.StringValue(s)) })
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
}

func array[T any](xs []T, conv func(T) *commonpb.AnyValue) *commonpb.AnyValue {
	vs := make([]*commonpb.AnyValue, 0, len(xs))
	for _, x := range xs {
		vs = append(vs, conv(x))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: vs}}}
}
