package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/tracingtest"
	"github.com/sluice-dev/sluice/tracing/otlp"
	"github.com/sluice-dev/sluice/webhook"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// TestTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, a verified hook is
// exported to an in-process collector as a span (a child of the sender's
// traceparent) with children verify, hit, store and settle; the stored
// message carries the store span as its traceparent; and a client call
// joins the service's span to the caller's trace. (Not parallel: it sets
// the process's environment.)
func TestTracing(t *testing.T) {
	col := tracingtest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.URL())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // ms: export soon
	t.Setenv("OTEL_SERVICE_NAME", "")
	a := startApp(t, `
tenants:
  acme:
    sources:
      gh: {dedupe: github, verify: github, secret: "s3cret"}
`)
	const sender = "4bf92f3577b34da6a3ce929d0e0e4736"
	const senderSpan = "00f067aa0ba902b7"
	body := []byte(`{"zen":"traced"}`)
	r := a.post("/v1/hooks/acme/gh", body, map[string]string{
		"X-Hub-Signature-256": webhook.SignGitHub("s3cret", body),
		"X-GitHub-Delivery":   "d1",
		"traceparent":         "00-" + sender + "-" + senderSpan + "-01",
	})
	mustStatus(t, r, 202)
	id := str(r.body["id"])

	spans := col.WaitFor(t, "the hook's five spans", func(s []tracingtest.Span) bool {
		n := 0
		for _, sp := range s {
			if sp.TraceID == sender {
				n++
			}
		}
		return n == 5
	})
	byName := map[string]tracingtest.Span{}
	for _, sp := range spans {
		if sp.TraceID == sender {
			byName[sp.Name] = sp
		}
	}
	hook := byName[httpapi.SpanHook]
	if hook.ParentID != senderSpan || hook.Kind != tracepb.Span_SPAN_KIND_SERVER || hook.Service != "sluice-edge" ||
		hook.Attributes["sluice.tenant"] != "acme" || hook.Attributes["sluice.source"] != "gh" || hook.Attributes["sluice.hook_id"] != id {
		t.Fatalf("hook span %+v", hook)
	}
	for _, name := range []string{httpapi.SpanVerify, httpapi.SpanHit, httpapi.SpanStore, httpapi.SpanSettle} {
		sp, ok := byName[name]
		if !ok || sp.ParentID != hook.SpanID || sp.StatusError || sp.StartUnixNano < hook.StartUnixNano || sp.EndNano > hook.EndNano {
			t.Fatalf("%s span %+v (hook span %s)", name, sp, hook.SpanID)
		}
	}
	if byName[httpapi.SpanStore].Kind != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Fatalf("store span kind %v", byName[httpapi.SpanStore].Kind)
	}
	// verify, hit, store, settle follow each other.
	order := []string{httpapi.SpanVerify, httpapi.SpanHit, httpapi.SpanStore, httpapi.SpanSettle}
	for i := 1; i < len(order); i++ {
		if byName[order[i]].StartUnixNano < byName[order[i-1]].EndNano {
			t.Fatalf("%s starts before %s ends", order[i], order[i-1])
		}
	}

	// The stored hook's traceparent is the store span: a consumer's span
	// continues the trace from there.
	m := a.stored()[id]
	want := "00-" + sender + "-" + byName[httpapi.SpanStore].SpanID + "-01"
	if got := m.Header.Get("traceparent"); got != want {
		t.Fatalf("stored traceparent %q, want %q", got, want)
	}

	// A client with a tracer: its span is the parent of the service's.
	p, err := otlp.FromEnv(testkit.Context(t), "caller")
	if err != nil || p == nil {
		t.Fatalf("caller's provider: %v %v", p, err)
	}
	c, err := client.New(a.nats.Conn, client.WithTracer(p.Tracer()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetClaim(testkit.Context(t), "acme", "gh", "nope"); err != nil {
		t.Fatal(err)
	}
	if err := p.Shutdown(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	col.WaitFor(t, "the client's span and the service's under it", func(s []tracingtest.Span) bool {
		for _, cl := range s {
			if cl.Service != "caller" || cl.Kind != tracepb.Span_SPAN_KIND_CLIENT || !strings.HasSuffix(cl.Name, ".claims.get") {
				continue
			}
			for _, sv := range s {
				if sv.Service == "sluice-edge" && sv.Kind == tracepb.Span_SPAN_KIND_SERVER && sv.ParentID == cl.SpanID && sv.TraceID == cl.TraceID &&
					sv.Name == "sluice.v1.claims.get" {
					return true
				}
			}
		}
		return false
	})
}
