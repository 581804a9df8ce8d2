package hooks

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/promreg"
)

// Bounds of the managed consumers' metrics.
const (
	// ConsumerMetricsTTL is how long one reading of the consumers serves
	// scrapes: a scrape reads JetStream at most once per TTL.
	ConsumerMetricsTTL = 10 * time.Second
	// MaxConsumerSeries bounds the consumers the metrics show (the
	// tenants' 16 each, past which a fleet's scrape would grow without
	// bound); the rest are counted in sluice_consumer_metrics_dropped.
	MaxConsumerSeries = 1000
	// consumerMetricsTimeout bounds one reading.
	consumerMetricsTimeout = 5 * time.Second
)

// consumerLag is one managed consumer's reading.
type consumerLag struct {
	tenant, name                     string
	pending, ackPending, redelivered float64
	oldestAge                        float64 // seconds; 0: nothing unacked
	dead                             float64 // dead letters kept
}

// consumerCollector is the managed consumers' lag on /metrics, read from
// JetStream when a scrape finds its last reading older than
// ConsumerMetricsTTL (no goroutine of its own: the scrape's). It holds at
// most MaxConsumerSeries readings.
type consumerCollector struct {
	s                                        *HookStore
	pending, ackPending, redelivered, oldest *prometheus.Desc
	dead                                     *prometheus.Desc
	dropped, errors                          *prometheus.Desc
	now                                      func() time.Time // the readings' clock (time.Now)

	mu      sync.Mutex
	readAt  time.Time
	lags    []consumerLag
	nDrop   int
	nErrors float64
}

// RegisterConsumerMetrics registers the managed consumers' gauges of s
// on reg (docs/OPERATIONS.md "Metrics"): per consumer (labels tenant,
// consumer) sluice_consumer_pending, _ack_pending, _redelivered and
// _oldest_unacked_age_seconds; sluice_consumer_metrics_dropped and
// sluice_consumer_metrics_errors_total.
func RegisterConsumerMetrics(reg prometheus.Registerer, s *HookStore) error {
	_, err := promreg.Register(reg, prometheus.Collector(newConsumerCollector(s, time.Now)))
	return err
}

// newConsumerCollector is the collector of s's managed consumers, its
// readings timed by now.
func newConsumerCollector(s *HookStore, now func() time.Time) *consumerCollector {
	l := []string{"tenant", "consumer"}
	return &consumerCollector{s: s, now: now,
		pending:     prometheus.NewDesc("sluice_consumer_pending", "Hooks stored and not yet delivered, per managed consumer.", l, nil),
		ackPending:  prometheus.NewDesc("sluice_consumer_ack_pending", "Hooks delivered and not yet acked, per managed consumer.", l, nil),
		redelivered: prometheus.NewDesc("sluice_consumer_redelivered", "Hooks delivered more than once and not yet acked, per managed consumer.", l, nil),
		dead:        prometheus.NewDesc("sluice_consumer_dead_letters", "Dead letters kept in DEADLETTER, per managed consumer.", l, nil),
		oldest:      prometheus.NewDesc("sluice_consumer_oldest_unacked_age_seconds", "Age of the oldest hook a managed consumer has not had acked (delivered or not); 0 when none.", l, nil),
		dropped:     prometheus.NewDesc("sluice_consumer_metrics_dropped", "Managed consumers left out of the per-consumer metrics (over 1000).", nil, nil),
		errors:      prometheus.NewDesc("sluice_consumer_metrics_errors_total", "Readings of the managed consumers that failed (the last good one is shown).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *consumerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pending, c.ackPending, c.redelivered, c.oldest, c.dead, c.dropped, c.errors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *consumerCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now().Sub(c.readAt) >= ConsumerMetricsTTL {
		ctx, cancel := context.WithTimeout(context.Background(), consumerMetricsTimeout)
		lags, drop, err := c.read(ctx)
		cancel()
		if err != nil {
			c.nErrors++
		} else {
			c.lags, c.nDrop = lags, drop
		}
		c.readAt = c.now()
	}
	for _, l := range c.lags {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, l.pending, l.tenant, l.name)
		ch <- prometheus.MustNewConstMetric(c.ackPending, prometheus.GaugeValue, l.ackPending, l.tenant, l.name)
		ch <- prometheus.MustNewConstMetric(c.redelivered, prometheus.GaugeValue, l.redelivered, l.tenant, l.name)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, l.oldestAge, l.tenant, l.name)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, l.dead, l.tenant, l.name)
	}
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.GaugeValue, float64(c.nDrop))
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, c.nErrors)
}

// read lists the managed consumers of every hooks stream.
func (c *consumerCollector) read(ctx context.Context) ([]consumerLag, int, error) {
	var out []consumerLag
	drop := 0
	dead := map[string]uint64{} // dead letters by subject
	if st, err := c.s.js.Stream(ctx, DeadLetterStream); err == nil {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(c.s.prefix+".deadletter.>"))
		if err != nil {
			return nil, 0, err
		}
		dead = info.State.Subjects
	}
	for _, name := range HooksStreams(c.s.stream, c.s.shards) {
		st, err := c.s.js.Stream(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		l := st.ListConsumers(ctx)
		for info := range l.Info() {
			m, ok := managedOf(name, info)
			switch {
			case !ok:
				continue
			case len(out) >= MaxConsumerSeries:
				drop++
				continue
			}
			out = append(out, consumerLag{tenant: m.Tenant, name: m.Name, pending: float64(info.NumPending),
				ackPending: float64(info.NumAckPending), redelivered: float64(info.NumRedelivered),
				oldestAge: oldestUnacked(ctx, st, info), dead: float64(dead[DeadLetterSubject(c.s.prefix, m.Tenant, m.Name)])})
		}
		if err := l.Err(); err != nil {
			return nil, 0, err
		}
	}
	return out, drop, nil
}

// oldestUnacked is the age in seconds of the first hook past info's ack
// floor that one of its filters matches (0: none unacked, or unreadable).
func oldestUnacked(ctx context.Context, st jetstream.Stream, info *jetstream.ConsumerInfo) float64 {
	if info.NumPending == 0 && info.NumAckPending == 0 {
		return 0
	}
	var first time.Time
	for _, f := range info.Config.FilterSubjects {
		m, err := st.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(f))
		if err == nil && (first.IsZero() || m.Time.Before(first)) {
			first = m.Time
		}
	}
	if first.IsZero() {
		return 0
	}
	return time.Since(first).Seconds()
}
