package main

import (
	"math"
	"strings"
	"testing"
)

// syncLine reports the barrier's rounds, waits per round, mean round and
// a hook's mean and p99 wait from two /metrics samples.
func TestSyncLine(t *testing.T) {
	a := syncSample{rounds: 10, waits: 20, seconds: 1, hookWaits: 0, hookWaitSum: 0,
		buckets: map[float64]float64{0.001: 0, 0.0025: 0, 0.005: 0, math.Inf(1): 0}}
	b := syncSample{rounds: 110, waits: 420, seconds: 1.05, hookWaits: 400, hookWaitSum: 0.4,
		buckets: map[float64]float64{0.001: 300, 0.0025: 395, 0.005: 400, math.Inf(1): 400}}
	got := syncLine(a, b)
	for _, want := range []string{"100 rounds", "400 waits (4.0 per round)", "mean round 0.500 ms", "mean wait 1.000 ms", "p99 <= 5 ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("syncLine = %q: no %q", got, want)
		}
	}
	if got := syncLine(a, a); got != "barrier: no rounds" {
		t.Errorf("no rounds: %q", got)
	}
}
