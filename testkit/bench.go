package testkit

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// InFlight runs op(0..b.N-1) on n goroutines (n calls in flight), times
// only that, and reports ops/s and the process's CPU per op (cpu-µs/op:
// the in-process server's share included) next to ns/op (wall time per
// op). The first error stops the run and fails b.
func InFlight(b *testing.B, n int, op func(i int) error) {
	b.Helper()
	cpu0 := CPUTime(b)
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
	ReportCPU(b, cpu0)
}

// ReportCPU reports the process's CPU per op since cpu0 (a CPUTime) as
// cpu-µs/op, where the platform can tell.
func ReportCPU(b *testing.B, cpu0 time.Duration) {
	if cpu1 := CPUTime(b); cpu1 > 0 && b.N > 0 {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	}
}
