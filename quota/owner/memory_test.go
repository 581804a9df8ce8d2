package owner

import (
	"hash/fnv"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/internal/footprint"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/lease"
	"github.com/sluice-dev/sluice/quota/internal/settings"
)

// idleTenants is how many tenants BenchmarkIdleBucketMemory fills one
// partition's state with.
const idleTenants = 1_000_000

// BenchmarkIdleBucketMemory measures the heap one partition owner holds per
// idle GCRA bucket: 1M tenants are charged once each through the owner's
// real hit path (tenure.hit, reply discarded), then the live heap is
// compared with the one before (runtime.MemStats.HeapAlloc after a GC).
// The tenant names are fresh allocations retained only by the state, as
// when they come out of a decoded request, so their bytes count.
//
//	hooks        one charge per tenant (1 bucket per tenant)
//	hooks+bytes  the edge's two charges (2 buckets per tenant)
//	layout/...   candidate layouts, not the worker's: a flat map keyed by
//	             (kind, tenant), and a map keyed by a 64-bit hash of it
//
// Run with:
//
//	go test -run '^$' -bench BenchmarkIdleBucketMemory -benchtime 1x ./quota/owner/
//
// cmd/sluice-bench's memory row measures the same through the owner's public
// face (its own module cannot reach this state).
func BenchmarkIdleBucketMemory(b *testing.B) {
	for _, tc := range []struct {
		name  string
		kinds []string
	}{
		{"hooks", []string{protocol.KindHooks}},
		{"hooks+bytes", []string{protocol.KindHooks, protocol.KindBytes}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var per float64
			for b.Loop() {
				per = idleBucketBytes(b, tc.kinds)
			}
			b.ReportMetric(per, "bytes/bucket")
		})
	}
	type kindTenant struct {
		kind   uint8
		tenant string
	}
	b.Run("layout/map[kind,tenant]int64", func(b *testing.B) {
		layoutBytes(b, func(i int) kindTenant { return kindTenant{0, tenantName(i)} })
	})
	b.Run("layout/map[hash64]int64", func(b *testing.B) {
		layoutBytes(b, func(i int) uint64 { return bucketHash(protocol.KindHooks, tenantName(i)) })
	})
}

// layoutBytes reports the heap per bucket of a candidate layout: a map from
// key(i) to a value for each of idleTenants tenants.
func layoutBytes[K comparable](b *testing.B, key func(i int) K) {
	var per float64
	for b.Loop() {
		per = heapPerItem(idleTenants, func() any {
			m := make(map[K]int64)
			for i := range idleTenants {
				m[key(i)] = int64(i) + 1
			}
			return m
		})
	}
	b.ReportMetric(per, "bytes/bucket")
}

// idleBucketBytes fills a fresh tenure with idleTenants tenants charged
// once for each kind and returns the heap growth per bucket.
func idleBucketBytes(b *testing.B, kinds []string) float64 {
	b.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	cfg := defaults()
	if err := settings.Apply(&cfg, []Option{quota.WithClock(func() time.Time { return t0 })}); err != nil {
		b.Fatal(err)
	}
	met, err := newWorkerMetrics(nil)
	if err != nil {
		b.Fatal(err)
	}
	w := &Worker{cfg: cfg, met: met}
	// An hour per charge: every bucket stays ahead of the (fixed) clock, so
	// none is full and nothing could sweep it.
	const hour = int64(time.Hour / time.Microsecond)
	return heapPerItem(idleTenants*len(kinds), func() any {
		t := w.newTenure(&lease.Lease{N: 0})
		m := &nats.Msg{} // unbound: the reply is built, then dropped
		for i := range idleTenants {
			tenant := tenantName(i)
			r := protocol.HitRequest{Charges: make([]protocol.Charge, len(kinds))}
			for k, kind := range kinds {
				r.Charges[k] = protocol.Charge{Kind: kind, Tenant: tenant, IncrementUs: hour, CapacityUs: 24 * hour}
			}
			t.hit(m, &r, time.Second)
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		if n := t.state.len(); n != idleTenants*len(kinds) {
			b.Fatalf("partition holds %d buckets, want %d", n, idleTenants*len(kinds))
		}
		return t
	})
}

// heapPerItem returns the growth of the live heap caused by what fill
// builds and returns, divided by items.
func heapPerItem(items int, fill func() any) float64 {
	before := footprint.LiveHeap()
	v := fill()
	after := footprint.LiveHeap()
	runtime.KeepAlive(v)
	return float64(int64(after)-int64(before)) / float64(items)
}

// tenantName returns a freshly allocated 13-byte tenant name ("tenant-000042").
func tenantName(i int) string {
	return "tenant-" + strconv.Itoa(1_000_000 + i)[1:]
}

func bucketHash(kind, tenant string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(kind))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(tenant))
	return h.Sum64()
}

// len is the number of buckets s holds (not full).
func (s *bucketState) len() int {
	n := len(s.tats)
	for _, m := range s.over {
		n += len(m)
	}
	return n
}
