package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// syncSample is what the durable edge's /metrics says of its group sync
// at one instant (its sluice_store_sync_* metrics, and the edge's
// histogram of the time a hook waited on the barrier).
type syncSample struct {
	rounds, waits, seconds float64
	hookWaits, hookWaitSum float64
	// buckets: the histogram's cumulative counts by upper bound (s).
	buckets map[float64]float64
}

// sampleSync reads base's /metrics (metrics); ok is false when it cannot.
func sampleSync(ctx context.Context, base string) (syncSample, bool) {
	m := metrics(ctx, base)
	s := syncSample{
		rounds: m["sluice_store_sync_round_seconds_count"], waits: m["sluice_store_sync_waits_total"],
		seconds: m["sluice_store_sync_round_seconds_sum"], hookWaits: m["sluice_edge_sync_wait_seconds_count"],
		hookWaitSum: m["sluice_edge_sync_wait_seconds_sum"], buckets: map[float64]float64{},
	}
	for name, v := range m {
		if le, ok := strings.CutPrefix(name, `sluice_edge_sync_wait_seconds_bucket{le="`); ok {
			if b, err := strconv.ParseFloat(strings.TrimSuffix(le, `"}`), 64); err == nil {
				s.buckets[b] = v
			}
		}
	}
	return s, len(m) > 0
}

// syncLine says what the group sync did between a and b: rounds, the
// waits each served, a round's mean length and a hook's mean wait.
func syncLine(a, b syncSample) string {
	rounds, waits := b.rounds-a.rounds, b.waits-a.waits
	if rounds <= 0 {
		return "barrier: no rounds"
	}
	line := fmt.Sprintf("barrier: %.0f rounds, %.0f waits (%.1f per round), mean round %.3f ms",
		rounds, waits, waits/rounds, (b.seconds-a.seconds)*1000/rounds)
	if n := b.hookWaits - a.hookWaits; n > 0 {
		line += fmt.Sprintf(", a hook's mean wait %.3f ms", (b.hookWaitSum-a.hookWaitSum)*1000/n)
		line += fmt.Sprintf(", p99 <= %s", waitQuantile(a, b, n, 0.99))
	}
	return line
}

// waitQuantile is the upper bound of the histogram bucket holding the q
// quantile of the hooks' waits between a and b (n of them).
func waitQuantile(a, b syncSample, n, q float64) string {
	bounds := slices.Sorted(maps.Keys(b.buckets))
	for _, le := range bounds {
		if b.buckets[le]-a.buckets[le] >= q*n {
			if math.IsInf(le, 1) {
				break
			}
			return fmt.Sprintf("%g ms", le*1000)
		}
	}
	return "the largest bucket"
}
