package forward_test

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/testkit"
)

func body(int) []byte { return []byte("x") }

// The leaf drops its outbox copy of a batch only once the hub's sync
// barrier answered: while the barrier holds, the hub has stored the batch
// and the outbox still has all of it; one barrier request per batch.
func TestOutboxKeptUntilHubSynced(t *testing.T) {
	r := newOrderRig(t, true)
	var asked atomic.Int64
	var mu sync.Mutex
	open := false
	var held []func(error)
	then := func(fn func(error)) func() {
		asked.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if open {
			fn(nil)
		} else {
			held = append(held, fn)
		}
		return func() {}
	}
	r.syncThen.Store(&then)
	ids := r.storeHooks(t, "k", 50, body)
	r.start(t, forward.Config{Batch: 20})
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.hubStream) == 20 }, "the hub stored the first batch")
	time.Sleep(300 * time.Millisecond)
	if n := testkit.Msgs(t, r.outbox); n != 50 {
		t.Fatalf("the outbox holds %d hooks while the hub has not synced the first batch, want all 50", n)
	}
	if got := testkit.Msgs(t, r.hubStream); got != 20 {
		t.Fatalf("the hub holds %d hooks: the forwarder moved past a batch the hub had not synced", got)
	}
	mu.Lock()
	open = true
	for _, fn := range held {
		fn(nil)
	}
	mu.Unlock()
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.outbox) == 0 }, "outbox drained")
	if got := r.hubOrder(t); !slices.Equal(got, ids) {
		t.Errorf("hub order %v, want %v", got, ids)
	}
	if n := asked.Load(); n != 3 {
		t.Errorf("%d sync requests for 3 batches, want one each", n)
	}
}

// A barrier that fails keeps the outbox copy; only the barrier is asked
// again (the batch is not sent again), and once it answers the outbox
// drains.
func TestHubSyncFailureKeepsCopy(t *testing.T) {
	r := newOrderRig(t, true)
	var failing atomic.Bool
	failing.Store(true)
	then := func(fn func(error)) func() {
		if failing.Load() {
			fn(errors.New("disk on fire"))
		} else {
			fn(nil)
		}
		return func() {}
	}
	r.syncThen.Store(&then)
	ids := r.storeHooks(t, "f", 30, body)
	reg := prometheus.NewRegistry()
	r.start(t, forward.Config{Batch: 30, Registerer: reg, MaxBackoff: 100 * time.Millisecond})
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.MetricSeries(t, reg, "sluice_edge_hub_syncs_total")["failed"] >= 3 }, "the barrier failed thrice")
	if n := testkit.Msgs(t, r.outbox); n != 30 {
		t.Fatalf("the outbox holds %d hooks after failed barriers, want 30", n)
	}
	failing.Store(false)
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.outbox) == 0 }, "outbox drained")
	if got := r.hubOrder(t); !slices.Equal(got, ids) {
		t.Errorf("hub order %v, want %v", got, ids)
	}
	fw := testkit.MetricSeries(t, reg, "sluice_edge_forwarded_total")
	if fw["stored"] != 30 || fw["duplicate"] != 0 {
		t.Errorf("forwarded_total %v: want the batch sent once (stored 30, no duplicates)", fw)
	}
	if s := testkit.MetricSeries(t, reg, "sluice_edge_hub_syncs_total"); s["synced"] != 1 {
		t.Errorf("hub_syncs_total %v, want synced 1", s)
	}
}

// A hub without the barrier (older: no responders) is not trusted at its
// ack: the edge keeps each batch for HubSyncFallback after the hub's ack.
func TestOlderHubWithoutSync(t *testing.T) {
	r := newOrderRig(t, true)
	if err := r.sync.Stop(); err != nil {
		t.Fatal(err)
	}
	r.storeHooks(t, "o", 10, body)
	reg := prometheus.NewRegistry()
	wait := time.Second
	r.start(t, forward.Config{Registerer: reg, HubSyncFallback: wait})
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.hubStream) == 10 }, "the hub stored the batch")
	stored := time.Now()
	if n := testkit.Msgs(t, r.outbox); n != 10 {
		t.Fatalf("the outbox holds %d hooks right after an older hub's ack, want 10", n)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.outbox) == 0 }, "outbox drained")
	if d := time.Since(stored); d < wait/2 {
		t.Errorf("the outbox drained %v after the older hub's ack, want about %v", d, wait)
	}
	if s := testkit.MetricSeries(t, reg, "sluice_edge_hub_syncs_total"); s["waited"] != 1 || s["synced"] != 0 {
		t.Errorf("hub_syncs_total %v, want waited 1", s)
	}
}
