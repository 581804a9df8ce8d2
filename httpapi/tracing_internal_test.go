package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/tracing"
)

// TestTracingOffAllocatesNothing: with no tracer (tracing off), every
// tracing step of the hook path — the hook span, its children, their
// ends, the traceparent of the stored message — allocates nothing, even
// for a request that sends a traceparent.
func TestTracingOffAllocatesNothing(t *testing.T) {
	h := &Handler{cfg: Config{}}
	r := httptest.NewRequest("POST", "/v1/hooks/acme/gh", nil)
	r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	q := &hookRequest{w: httptest.NewRecorder(), r: r, tenant: "acme", source: "gh"}
	hdr := nats.Header{}
	n := testing.AllocsPerRun(1000, func() {
		h.startHookSpan(q)
		for _, name := range []string{SpanVerify, SpanHit, SpanStore, SpanSettle} {
			ctx, span := h.child(q, name, trace.SpanKindInternal)
			tracing.Inject(ctx, hdr)
			endSpan(span, true)
		}
		q.endHookSpan(202)
	})
	if n != 0 || q.tctx != nil || q.span != nil || len(hdr) != 0 {
		t.Fatalf("tracing off: %v allocs per hook, span %v, header %v", n, q.span, hdr)
	}
}
