package owner

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/promreg"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// workerMetrics are a Worker's Prometheus metrics. Labels are bounded:
// results, ops and lease events, never tenants or keys.
type workerMetrics struct {
	owned      prometheus.Gauge
	hits       *prometheus.CounterVec // result
	settles    *prometheus.CounterVec // result
	counterOps *prometheus.CounterVec // op, result
	inFlight   prometheus.Gauge
	leases     *prometheus.CounterVec // event

	// hits' children by result, resolved once (the hot path counts every
	// decision).
	hitOK, hitDuplicate, hitPending, hitLimited, hitInvalid, hitUnavailable prometheus.Counter
}

// hit counts one hit answered with result.
func (m *workerMetrics) hit(result string) {
	var c prometheus.Counter
	switch result {
	case protocol.ResultOK:
		c = m.hitOK
	case protocol.ResultDuplicate:
		c = m.hitDuplicate
	case protocol.ResultPending:
		c = m.hitPending
	case protocol.ResultRateLimited:
		c = m.hitLimited
	case "invalid":
		c = m.hitInvalid
	case "unavailable":
		c = m.hitUnavailable
	default:
		c = m.hits.WithLabelValues(result)
	}
	c.Inc()
}

// settle counts one settle item answered with status.
func (m *workerMetrics) settle(status frame.Status) {
	m.settles.WithLabelValues(settleResult(status)).Inc()
}

// settleResult is the label of a settle's answer.
func settleResult(status frame.Status) string {
	switch status {
	case frame.StatusAnswered:
		return protocol.ResultOK
	case frame.StatusLost:
		return "claim_lost"
	case frame.StatusInvalid:
		return "invalid"
	case frame.StatusUnavailable:
		return "unavailable"
	}
	return protocol.NotOwner.Code
}

func (m *workerMetrics) resolve() *workerMetrics {
	m.hitOK = m.hits.WithLabelValues(protocol.ResultOK)
	m.hitDuplicate = m.hits.WithLabelValues(protocol.ResultDuplicate)
	m.hitPending = m.hits.WithLabelValues(protocol.ResultPending)
	m.hitLimited = m.hits.WithLabelValues(protocol.ResultRateLimited)
	m.hitInvalid = m.hits.WithLabelValues("invalid")
	m.hitUnavailable = m.hits.WithLabelValues("unavailable")
	// Exported at zero from the start: every settle result.
	promreg.Zero(m.counterOps, []string{quota.OpReserve}, []string{"granted", "denied"})
	promreg.Zero(m.counterOps, []string{quota.OpRelease, quota.OpCount}, []string{protocol.ResultOK})
	promreg.Zero(m.settles, []string{protocol.ResultOK, "claim_lost", "invalid", "unavailable", protocol.NotOwner.Code})
	return m
}

func newWorkerMetrics(reg prometheus.Registerer) (*workerMetrics, error) {
	ms := promreg.NewSet(reg, "quota")
	m := &workerMetrics{
		owned:      ms.Gauge("partitions_owned", "Quota partitions whose lease this worker holds and serves."),
		hits:       ms.CounterVec("hits_total", "Hit requests answered by this worker, by result (ok, duplicate, pending, rate_limited, invalid, unavailable).", "result"),
		settles:    ms.CounterVec("settles_total", "Settle items of batch frames answered by this worker, by result (ok, claim_lost, invalid, unavailable, not_owner).", "result"),
		counterOps: ms.CounterVec("counter_ops_total", "Reserve/release/count requests answered by this worker, by op and result.", "op", "result"),
		inFlight:   ms.Gauge("kv_in_flight", "Requests waiting on a KV call (claim creates, counter write-through)."),
		leases:     ms.CounterVec("lease_events_total", "Partition lease transitions: acquired, released (graceful) and lost (expired or taken).", "event"),
	}
	if err := ms.Err(); err != nil {
		return nil, err
	}
	return m.resolve(), nil
}
