package fx

import (
	"context"
	"log/slog"

	uberfx "go.uber.org/fx"

	"github.com/sluice-dev/sluice/tracing/otlp"
)

// ServiceName is the default OpenTelemetry service.name of a node
// (OTEL_SERVICE_NAME overrides it).
const ServiceName = "sluice-edge"

// Tracing is the node's tracer provider; P is nil when the environment
// turns tracing off (the default: see otlp.Enabled).
type Tracing struct {
	P *otlp.Provider
}

// ProvideTracing starts tracing from the OTEL_* environment. Its stop,
// after the edge's and the service's (it is resolved before them),
// flushes the spans still queued.
func ProvideTracing(lc uberfx.Lifecycle, log *slog.Logger) (*Tracing, error) {
	p, err := otlp.FromEnv(context.Background(), ServiceName)
	if err != nil {
		return nil, err
	}
	if p != nil {
		log.Info("tracing on: OTLP/HTTP exporter from the OTEL_* environment")
		lc.Append(uberfx.Hook{OnStop: p.Shutdown})
	}
	return &Tracing{P: p}, nil
}
