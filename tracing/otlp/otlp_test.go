package otlp_test

import (
	"errors"
	"testing"

	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/tracingtest"
	"github.com/sluice-dev/sluice/tracing/otlp"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		on, bad bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, bad: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}}, // no endpoint: off, the protocol unused
	} {
		on, err := otlp.Enabled(func(k string) string { return c.env[k] })
		if on != c.on || errors.Is(err, otlp.ErrConfig) != c.bad || (err != nil) != c.bad {
			t.Errorf("%v: on %v, err %v; want on %v, error %v", c.env, on, err, c.on, c.bad)
		}
	}
}

// TestFromEnvExports: with the endpoint set, FromEnv's provider exports a
// parent and a child span to the collector, with the service name.
func TestFromEnvExports(t *testing.T) {
	c := tracingtest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL())
	t.Setenv("OTEL_SERVICE_NAME", "")
	ctx := testkit.Context(t)
	p, err := otlp.FromEnv(ctx, "sluice-test")
	if err != nil || p == nil {
		t.Fatalf("FromEnv: %v, %v", p, err)
	}
	tr := p.Tracer()
	pctx, parent := tr.Start(ctx, "parent")
	_, child := tr.Start(pctx, "child")
	child.End()
	parent.End()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	spans := c.WaitFor(t, "two spans", func(s []tracingtest.Span) bool { return len(s) == 2 })
	byName := map[string]tracingtest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	pa, ch := byName["parent"], byName["child"]
	if pa.TraceID == "" || ch.TraceID != pa.TraceID || ch.ParentID != pa.SpanID || pa.ParentID != "" || pa.Service != "sluice-test" {
		t.Fatalf("spans %+v", spans)
	}

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	if p, err := otlp.FromEnv(ctx, "x"); p != nil || err != nil || p.Tracer() != nil || p.Shutdown(ctx) != nil {
		t.Fatalf("off: %v, %v", p, err)
	}
}
