package hooks

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestConsumerMetricsReadEveryTTL: a reading of the managed consumers
// serves the scrapes of ConsumerMetricsTTL, and the first scrape after it
// reads JetStream again (the state changed between the two shows); a
// reading that fails is counted in sluice_consumer_metrics_errors_total
// and the last good one stays shown.
func TestConsumerMetricsReadEveryTTL(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	if _, err := EnsureStream(ctx, k.JS, StreamConfig{Prefix: "sluice"}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureDeadLetters(ctx, k.JS, "sluice", protocol.HooksStreamName, 1, 1); err != nil {
		t.Fatal(err)
	}
	s := NewShardedHookStore(k.JS, "sluice", "", 1)
	if _, _, err := s.PutConsumer(ctx, "acme", "w", ConsumerSpec{}); err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64 // ns since t0
	t0 := time.Now()
	reg := prometheus.NewRegistry()
	reg.MustRegister(newConsumerCollector(s, func() time.Time { return t0.Add(time.Duration(clock.Load())) }))
	series := func(name string) float64 {
		t.Helper()
		key := "w/acme" // the labels consumer, tenant
		if name == "sluice_consumer_metrics_errors_total" {
			key = ""
		}
		v, ok := testkit.MetricSeries(t, reg, name)[key]
		if !ok {
			t.Fatalf("%s: no series", name)
		}
		return v
	}
	store := func(id string) {
		t.Helper()
		if _, err := s.Store(ctx, Hook{ID: id, Tenant: "acme", Source: "gh", ReceivedAt: time.Now(), Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	if got := series("sluice_consumer_pending"); got != 0 {
		t.Fatalf("pending at the first reading: %v, want 0", got)
	}
	store("h1")
	clock.Store(int64(ConsumerMetricsTTL - time.Millisecond))
	if got := series("sluice_consumer_pending"); got != 0 {
		t.Fatalf("pending within the reading's TTL: %v, want the reading's 0", got)
	}
	clock.Store(int64(ConsumerMetricsTTL))
	if got := series("sluice_consumer_pending"); got != 1 {
		t.Fatalf("pending after the TTL: %v, want a new reading's 1", got)
	}
	if got := series("sluice_consumer_metrics_errors_total"); got != 0 {
		t.Fatalf("errors before any failed reading: %v", got)
	}
	// The hooks stream gone: the next reading fails.
	if err := k.JS.DeleteStream(context.Background(), protocol.HooksStreamName); err != nil {
		t.Fatal(err)
	}
	clock.Store(int64(2 * ConsumerMetricsTTL))
	if got := series("sluice_consumer_metrics_errors_total"); got != 1 {
		t.Fatalf("errors after a failed reading: %v, want 1", got)
	}
	if got := series("sluice_consumer_pending"); got != 1 {
		t.Fatalf("pending after a failed reading: %v, want the last good reading's 1", got)
	}
}
