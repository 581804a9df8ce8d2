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
	benchParallel(b, len(keys), func() func(i int, now int64) error {
		return func(i int, now int64) error {
			_, err := l.Charge(keys[i], lim, now)
			return err
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
	benchParallel(b, len(hooks), func() func(i int, now int64) error {
		keys := make([]string, 2) // one per goroutine: no allocation per charge
		return func(i int, now int64) error {
			keys[0], keys[1] = hooks[i], bytes[i]
			_, err := l.ChargeAll(keys, lims, now)
			return err
		}
	})
}

// benchParallel charges each of n buckets once at t0 (untimed), then from
// GOMAXPROCS goroutines, each with a charger of its own from newCharger,
// walks the buckets from a random one, one µs of simulated time a charge.
func benchParallel(b *testing.B, n int, newCharger func() func(i int, now int64) error) {
	warm := newCharger()
	for i := range n {
		if err := warm(i, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		charge := newCharger()
		i := rand.IntN(n)
		now := t0
		for pb.Next() {
			now += 1
			if err := charge(i, now); err != nil {
				b.Fatal(err)
			}
			if i++; i == n {
				i = 0
			}
		}
	})
}
