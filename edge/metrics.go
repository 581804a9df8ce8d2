package edge

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/promreg"
)

// metrics of the edge. Labels are bounded: outcome, status, store — never a
// tenant, source or key.
type metrics struct {
	requests     *prometheus.CounterVec // outcome, code
	hitLatency   prometheus.Histogram   // seconds of one Admitter.Hit
	pubLatency   prometheus.Histogram   // seconds of one stream publish+ack
	syncLatency  prometheus.Histogram   // seconds waited on the durability barrier
	claimOutcome *prometheus.CounterVec // outcome: ok|duplicate|key_reused|pending|settled|settle_lost|released|release_failed
	fallback     *prometheus.CounterVec // what: hit|replay
	replay       *prometheus.CounterVec // outcome
	adminOps     *prometheus.CounterVec // op, code
}

// newMetrics creates the collectors and registers them on reg (nil: not
// registered; promreg.Register's policy).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "requests_total",
			Help: "Webhook requests by outcome and HTTP status code.",
		}, []string{"outcome", "code"}),
		hitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "hit_seconds",
			Help:    "Latency of one quota hit (charges plus claim) as seen by the edge.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		pubLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "stream_publish_seconds",
			Help:    "Latency of storing one hook in the stream (publish until ack).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		syncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "sync_wait_seconds",
			Help:    "Time a hook's answer waited on the durability barrier (a sync round after its acks).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
		claimOutcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "claims_total",
			Help: "Dedupe claim outcomes at the edge.",
		}, []string{"outcome"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "fallback_total",
			Help: "Requests answered from node-local state because the fleet store was unavailable.",
		}, []string{"what"}),
		replay: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "replay_claims_total",
			Help: "Replay-nonce claims by outcome.",
		}, []string{"outcome"}),
		adminOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "edge", Name: "admin_requests_total",
			Help: "Admin API requests by operation and status code.",
		}, []string{"op", "code"}),
	}
	var err error
	if m.requests, err = promreg.Register(reg, m.requests); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.hitLatency, err = promreg.Register(reg, m.hitLatency); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.pubLatency, err = promreg.Register(reg, m.pubLatency); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.syncLatency, err = promreg.Register(reg, m.syncLatency); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.claimOutcome, err = promreg.Register(reg, m.claimOutcome); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.fallback, err = promreg.Register(reg, m.fallback); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.replay, err = promreg.Register(reg, m.replay); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	if m.adminOps, err = promreg.Register(reg, m.adminOps); err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	return m, nil
}

// registerReady registers sluice_edge_ready, what /readyz answers as a
// gauge: 1 while ready returns nil, else 0 (always 1 without a ready
// function, as /readyz is then always 200), so an alert can see an unready
// node that the load balancer already took out.
func registerReady(reg prometheus.Registerer, ready func() error) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Subsystem: "edge", Name: "ready",
		Help: "1 while GET /readyz answers 200, else 0.",
	}, func() float64 {
		if ready != nil && ready() != nil {
			return 0
		}
		return 1
	})
	if _, err := promreg.Register(reg, g); err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	return nil
}

// statusLabel is an HTTP status as a metric label, from a fixed set.
func statusLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}
