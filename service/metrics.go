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
	ms := promreg.NewSet(reg, "service")
	m := &metrics{
		requests: ms.CounterVec("requests_total", "Requests answered by the sluice NATS service, by endpoint subject and outcome.", "endpoint", "outcome"),
		duration: ms.HistogramVec("request_duration_seconds", "Time from a request's arrival to its answer, by endpoint subject.", []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}, "endpoint"),
		inFlight: ms.Gauge("requests_in_flight", "Requests the sluice NATS service is handling now."),
	}
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	return m, nil
}

func (m *metrics) observe(endpoint, outcome string, d time.Duration) {
	m.requests.WithLabelValues(endpoint, outcome).Inc()
	m.duration.WithLabelValues(endpoint).Observe(d.Seconds())
}
