// Package otlp starts sluice's OpenTelemetry tracer provider from the
// standard OTEL_* environment variables, with the one exporter built in:
// OTLP over HTTP/protobuf (no gRPC). Without those variables tracing is
// off: FromEnv returns nil and its Tracer is nil.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/tracing"
)

// ErrConfig wraps every error of FromEnv: the environment asks for
// something this build cannot do (the node refuses to start).
var ErrConfig = errors.New("tracing: invalid configuration")

// Provider is a running tracer provider with its OTLP/HTTP exporter. A nil
// *Provider is tracing off.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Enabled reports whether the environment (getenv: os.Getenv in use)
// turns tracing on:
//
//   - OTEL_SDK_DISABLED=true: off;
//   - OTEL_TRACES_EXPORTER: "none" off, "otlp" on; unset, on exactly when
//     OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is
//     set; any other exporter is an error;
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (else OTEL_EXPORTER_OTLP_PROTOCOL):
//     unset or http/protobuf; grpc and http/json are errors (not built in).
func Enabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false, nil
	case "otlp":
		on = true
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q (want otlp or none)", ErrConfig, exp)
	}
	if !on {
		return false, nil
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("%w: OTLP protocol %q (only http/protobuf is built in)", ErrConfig, proto)
	}
	return true, nil
}

// FromEnv starts the tracer provider the environment asks for (see
// Enabled), or returns nil (tracing off). The exporter, sampler, batching
// and resource read the standard OTEL_* variables (docs/OPERATIONS.md);
// service.name defaults to service. Shut it down to flush the spans still
// queued.
func FromEnv(ctx context.Context, service string) (*Provider, error) {
	on, err := Enabled(os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: OTLP exporter: %w", ErrConfig, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, fmt.Errorf("%w: resource: %w", ErrConfig, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{tp: tp}, nil
}

// Tracer is sluice's tracer, nil when p is nil (tracing off).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(tracing.ScopeName)
}

// ForceFlush exports every span ended so far.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Shutdown flushes the queued spans and stops the exporter (nil p: no-op).
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}
