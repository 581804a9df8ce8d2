package tracing_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/tracing"
)

func TestHeaderCarrier(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		ctx := tracing.Extract(context.Background(), nats.Header{name: {tp}})
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() {
			t.Fatalf("%s: extracted %+v", name, sc)
		}
		h := nats.Header{"Traceparent": {"stale"}, "Sluice-Hook-Id": {"h1"}}
		tracing.Inject(ctx, h)
		if len(h) != 2 || h.Get("traceparent") != tp || h.Get("Sluice-Hook-Id") != "h1" {
			t.Fatalf("injected %v", h)
		}
	}
	// Malformed or absent: nothing extracted, nothing injected.
	for _, h := range []nats.Header{nil, {}, {"traceparent": {"00-zz-yy-01"}}, {"traceparent": {""}}} {
		ctx := tracing.Extract(context.Background(), h)
		if trace.SpanContextFromContext(ctx).IsValid() {
			t.Fatalf("%v: extracted a span context", h)
		}
		out := nats.Header{}
		tracing.Inject(ctx, out)
		if len(out) != 0 {
			t.Fatalf("%v: injected %v", h, out)
		}
	}
	// Untraced: Inject writes and allocates nothing.
	h := nats.Header{}
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { tracing.Inject(ctx, h) }); n != 0 || len(h) != 0 {
		t.Fatalf("untraced Inject: %v allocs, header %v", n, h)
	}
}
