// Package tracing carries W3C trace context (traceparent, tracestate) in
// NATS headers for sluice's OpenTelemetry spans, on the OpenTelemetry API
// only (tracing/otlp starts the SDK from the environment). Off, there is no
// tracer (a nil trace.Tracer), and the tracing packages test for nil first,
// so an untraced hook or call costs no allocation.
package tracing

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of sluice's spans.
const ScopeName = "github.com/sluice-dev/sluice"

// propagator is W3C trace context: traceparent and tracestate.
var propagator = propagation.TraceContext{}

// HeaderCarrier is a nats.Header as a propagation.TextMapCarrier. NATS
// header names are case-sensitive: it writes the W3C names as they are
// (lower case) and reads them in any case.
type HeaderCarrier nats.Header

// Get returns the first value of key, matched exactly, else in any case.
func (c HeaderCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range c {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set sets key to value, replacing a value under the same name in any
// case.
func (c HeaderCarrier) Set(key, value string) {
	for k := range c {
		if k != key && strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[key] = []string{value}
}

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Inject writes the span context of ctx to h (traceparent, and
// tracestate when there is one). Nothing when ctx holds no valid span
// context — so an untraced call writes no header and allocates nothing.
func Inject(ctx context.Context, h nats.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() || h == nil {
		return
	}
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the remote span context that h carries (ctx
// itself when it carries none or a malformed one).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// ExtractHTTP is Extract for the headers of an HTTP request.
func ExtractHTTP(ctx context.Context, h map[string][]string) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}
