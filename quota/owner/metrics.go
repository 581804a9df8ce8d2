package owner

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/promreg"
	"github.com/sluice-dev/sluice/quota"
)

// workerMetrics are a Worker's Prometheus metrics. Labels are bounded:
// results, ops and lease events, never tenants or keys.
type workerMetrics struct {
	owned      prometheus.Gauge
	hits       *prometheus.CounterVec // result
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
	case quota.ResultOK:
		c = m.hitOK
	case quota.ResultDuplicate:
		c = m.hitDuplicate
	case quota.ResultPending:
		c = m.hitPending
	case quota.ResultRateLimited:
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

func (m *workerMetrics) resolve() *workerMetrics {
	m.hitOK = m.hits.WithLabelValues(quota.ResultOK)
	m.hitDuplicate = m.hits.WithLabelValues(quota.ResultDuplicate)
	m.hitPending = m.hits.WithLabelValues(quota.ResultPending)
	m.hitLimited = m.hits.WithLabelValues(quota.ResultRateLimited)
	m.hitInvalid = m.hits.WithLabelValues("invalid")
	m.hitUnavailable = m.hits.WithLabelValues("unavailable")
	return m
}

func newWorkerMetrics(reg prometheus.Registerer) (*workerMetrics, error) {
	m := &workerMetrics{
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "quota", Name: "partitions_owned",
			Help: "Quota partitions whose lease this worker holds and serves.",
		}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "quota", Name: "hits_total",
			Help: "Hit requests answered by this worker, by result (ok, duplicate, pending, rate_limited, invalid, unavailable).",
		}, []string{"result"}),
		counterOps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "quota", Name: "counter_ops_total",
			Help: "Reserve/release/count requests answered by this worker, by op and result.",
		}, []string{"op", "result"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sluice", Subsystem: "quota", Name: "kv_in_flight",
			Help: "Requests waiting on a KV call (claim creates, counter write-through).",
		}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sluice", Subsystem: "quota", Name: "lease_events_total",
			Help: "Partition lease transitions: acquired, released (graceful) and lost (expired or taken).",
		}, []string{"event"}),
	}
	var err error
	if m.owned, err = promreg.Register(reg, m.owned); err != nil {
		return nil, err
	}
	if m.hits, err = promreg.Register(reg, m.hits); err != nil {
		return nil, err
	}
	if m.counterOps, err = promreg.Register(reg, m.counterOps); err != nil {
		return nil, err
	}
	if m.inFlight, err = promreg.Register(reg, m.inFlight); err != nil {
		return nil, err
	}
	if m.leases, err = promreg.Register(reg, m.leases); err != nil {
		return nil, err
	}
	return m.resolve(), nil
}
