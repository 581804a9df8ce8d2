package httpapi

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
	fallback     *prometheus.CounterVec // what: hit
	replay       *prometheus.CounterVec // outcome
	adminOps     *prometheus.CounterVec // op, code
}

// newMetrics creates the collectors and registers them on reg (nil: not
// registered; promreg.Register's policy).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	ms := promreg.NewSet(reg, "edge")
	m := &metrics{
		requests:     ms.CounterVec("requests_total", "Webhook requests by outcome and HTTP status code.", "outcome", "code"),
		hitLatency:   ms.Histogram("hit_seconds", "Latency of one quota hit (charges plus claim) as seen by the edge.", []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}),
		pubLatency:   ms.Histogram("stream_publish_seconds", "Latency of storing one hook in the stream (publish until ack).", []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}),
		syncLatency:  ms.Histogram("sync_wait_seconds", "Time a hook's answer waited on the durability barrier (a sync round after its acks).", []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}),
		claimOutcome: ms.CounterVec("claims_total", "Dedupe claim outcomes at the edge.", "outcome"),
		fallback:     ms.CounterVec("fallback_total", "Requests answered from node-local state because the fleet store was unavailable.", "what"),
		replay:       ms.CounterVec("replay_claims_total", "Replay-nonce claims by outcome.", "outcome"),
		adminOps:     ms.CounterVec("admin_requests_total", "Admin API requests by operation and status code.", "op", "code"),
	}
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("httpapi: %w", err)
	}
	// Exported at zero from the start (docs/OPERATIONS.md, the shipped
	// alerts): the outcomes every node can have, the claim outcomes and
	// the hit fallback (a replay nonce has none: it fails closed).
	promreg.Zero(m.requests, []string{"accepted"}, []string{"202"})
	promreg.Zero(m.requests, []string{"duplicate"}, []string{"200"})
	promreg.Zero(m.claimOutcome, []string{"ok", "duplicate", "key_reused", "pending", "settled", "settle_lost", "released", "release_failed"})
	promreg.Zero(m.fallback, []string{"hit"})
	promreg.Zero(m.replay, []string{"claimed", "already_claimed", "full", "error", "released", "release_failed"})
	// The admin API's token check: the one code every operation answers.
	promreg.Zero(m.adminOps, []string{"delete_limits", "get_claim", "get_limits", "get_receipt", "other", "put_limits", "rewind"}, []string{"401"})
	return m, nil
}

// registerReady registers sluice_edge_ready, /readyz as a gauge (1 while
// ready returns nil or without a ready function), so an alert can see an
// unready node the load balancer already took out.
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
		return fmt.Errorf("httpapi: %w", err)
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
