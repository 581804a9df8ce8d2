package gcra_test

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/gcra"
)

// A tenant may send 2 hooks per second with a burst of 1. The caller keeps
// the bucket's TAT (one int64) and passes the time in.
func Example_charge() {
	lim, err := gcra.LimitFromRate(2, 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("RateLimit-Policy: \"hooks\";q=%d;w=%d\n", lim.Burst(), gcra.CeilSeconds(lim.Window()))

	t0 := gcra.Micros(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var tat int64 // no state: a full bucket
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 600 * time.Millisecond} {
		d := lim.Charge(tat, t0+at.Microseconds())
		tat = d.TAT // unchanged when denied
		if d.Allowed {
			fmt.Printf("t0+%v: ok, RateLimit: \"hooks\";r=%d;t=%d\n", at, d.Remaining, gcra.CeilSeconds(d.ResetAfter))
		} else {
			fmt.Printf("t0+%v: 429, retry_after_ms=%d, Retry-After: %d\n", at, d.RetryAfter.Milliseconds(), max(1, gcra.CeilSeconds(d.RetryAfter)))
		}
	}
	// Output:
	// RateLimit-Policy: "hooks";q=1;w=1
	// t0+0s: ok, RateLimit: "hooks";r=0;t=1
	// t0+100ms: 429, retry_after_ms=400, Retry-After: 1
	// t0+600ms: ok, RateLimit: "hooks";r=0;t=1
}

// The node-local fallback: hooks and bytes charged together, all or nothing.
func ExampleLimiter_ChargeAll() {
	hooks, _ := gcra.LimitFromRate(10, 20)
	body, err := gcra.LimitFromRateN(1<<20, 4<<20, 3<<20) // a 3 MiB body against 1 MiB/s, burst 4 MiB
	if err != nil {
		panic(err)
	}
	var l gcra.Limiter
	keys := []string{"hooks/acme", "bytes/acme"}
	now := gcra.Micros(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	for range 2 {
		d, err := l.ChargeAll(keys, []gcra.Limit{hooks, body}, now)
		if err != nil {
			panic(err)
		}
		fmt.Println(d.Allowed, d.RetryAfter)
	}
	// Output:
	// true 0s
	// false 2s
}
