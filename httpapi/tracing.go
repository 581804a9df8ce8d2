package httpapi

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/tracing"
)

// Span names of the hook path (docs/PROTOCOL.md "Extensions", tracing).
const (
	SpanHook   = "POST /v1/hooks/{tenant}/{source}"
	SpanVerify = "verify"
	SpanHit    = "hit"
	SpanStore  = "store"
	SpanSettle = "settle"
)

// startHookSpan starts q's hook span, a child of the sender's traceparent
// when it sends one, when tracing is on (Config.Tracer). Off, q.tctx stays
// nil and nothing else of tracing runs: no allocation for an untraced
// hook.
func (h *Handler) startHookSpan(q *hookRequest) {
	if h.cfg.Tracer == nil {
		return
	}
	ctx := tracing.ExtractHTTP(q.r.Context(), q.r.Header)
	q.tctx, q.span = h.cfg.Tracer.Start(ctx, SpanHook, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("sluice.tenant", q.tenant), attribute.String("sluice.source", q.source)))
}

// endHookSpan ends q's hook span with the response's status.
func (q *hookRequest) endHookSpan(status int) {
	if q.span == nil {
		return
	}
	q.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if q.hookID != "" {
		q.span.SetAttributes(attribute.String("sluice.hook_id", q.hookID))
	}
	if status >= 500 {
		q.span.SetStatus(codes.Error, "")
	}
	q.span.End()
}

// child starts a child span of q's hook span: its context (for the work
// it times) and the span — or, with tracing off, the request's context and
// a nil span (endSpan of nil does nothing).
func (h *Handler) child(q *hookRequest, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if q.tctx == nil {
		return q.r.Context(), nil
	}
	return h.cfg.Tracer.Start(q.tctx, name, trace.WithSpanKind(kind))
}

// endSpan ends s (nil: tracing off), marked failed when ok is false.
func endSpan(s trace.Span, ok bool) {
	if s == nil {
		return
	}
	if !ok {
		s.SetStatus(codes.Error, "")
	}
	s.End()
}
