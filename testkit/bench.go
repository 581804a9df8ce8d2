package testkit

import (
	"sync"
	"sync/atomic"
	"testing"
)

// InFlight runs op(0..b.N-1) on n goroutines (n calls in flight), times
// only that, and reports ops/s next to ns/op (wall time per op). The first
// error stops the run and fails b.
func InFlight(b *testing.B, n int, op func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	b.StartTimer() // a no-op unless an earlier InFlight stopped it
	for range n {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= b.N || failed.Load() != nil {
					return
				}
				if err := op(i); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}
