package service

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/promreg"
)

// metrics of a Service. Labels are bounded: endpoint (one per subject) and
// outcome (ok, invalid, claim_lost, unavailable, error); never a tenant or
// a key.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

// newMetrics creates the collectors and registers them on reg (nil: not
// registered). Collectors already registered by another Service on the same
// registry are shared.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "service", Name: "requests_total",
			Help: "Requests answered by the sluice NATS service, by endpoint subject and outcome.",
		}, []string{"endpoint", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "service", Name: "request_duration_seconds",
			Help:    "Time from a request's arrival to its answer, by endpoint subject.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"endpoint"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "service", Name: "requests_in_flight",
			Help: "Requests the sluice NATS service is handling now.",
		}),
	}
	var err error
	if m.requests, err = promreg.Register(reg, m.requests); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	if m.duration, err = promreg.Register(reg, m.duration); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	if m.inFlight, err = promreg.Register(reg, m.inFlight); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	return m, nil
}

func (m *metrics) observe(endpoint, outcome string, d time.Duration) {
	m.requests.WithLabelValues(endpoint, outcome).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}
