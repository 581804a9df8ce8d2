package gcra

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// go test -run='^$' -bench=. -benchmem ./gcra/

func BenchmarkCharge(b *testing.B) {
	lim := Limit{Increment: 10_000, Capacity: 2_000_000} // 100/s, burst 200
	b.Run("allowed", func(b *testing.B) {
		tat, now := int64(0), t0
		for b.Loop() {
			now += 10_000
			tat = lim.Charge(tat, now).TAT
		}
	})
	b.Run("denied", func(b *testing.B) {
		tat := t0 + 2_000_000
		var d Decision
		for b.Loop() {
			d = lim.Charge(tat, t0)
		}
		if d.Allowed {
			b.Fatal("allowed")
		}
	})
}

func BenchmarkChargeAll2(b *testing.B) {
	lim := Limit{Increment: 10_000, Capacity: 2_000_000}
	tats, limits := []int64{0, 0}, []Limit{lim, lim}
	now := t0
	for b.Loop() {
		now += 10_000
		if _, err := ChargeAll(tats, limits, now); err != nil {
			b.Fatal(err)
		}
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("hooks/tenant-%06d", i)
	}
	return keys
}

// BenchmarkLimiterParallel charges 100k buckets from GOMAXPROCS goroutines;
// each bucket is 100/s burst 200 and is hit every few µs of simulated time,
// so most charges are admitted.
func BenchmarkLimiterParallel(b *testing.B) {
	keys := benchKeys(100_000)
	lim := Limit{Increment: 10_000, Capacity: 2_000_000}
	var l Limiter
	for _, k := range keys {
		if _, err := l.Charge(k, lim, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(keys))
		now := t0
		for pb.Next() {
			now += 1
			if _, err := l.Charge(keys[i], lim, now); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// BenchmarkLimiterChargeAllParallel is the edge's fallback shape: a hooks and
// a bytes bucket per tenant, charged together.
func BenchmarkLimiterChargeAllParallel(b *testing.B) {
	hooks, bytes := benchKeys(100_000), make([]string, 100_000)
	for i := range bytes {
		bytes[i] = fmt.Sprintf("bytes/tenant-%06d", i)
	}
	lim := Limit{Increment: 10_000, Capacity: 2_000_000}
	lims := []Limit{lim, lim}
	var l Limiter
	for i := range hooks {
		if _, err := l.ChargeAll([]string{hooks[i], bytes[i]}, lims, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(hooks))
		now := t0
		keys := make([]string, 2)
		for pb.Next() {
			now += 1
			keys[0], keys[1] = hooks[i], bytes[i]
			if _, err := l.ChargeAll(keys, lims, now); err != nil {
				b.Fatal(err)
			}
			if i++; i == len(hooks) {
				i = 0
			}
		}
	})
}
