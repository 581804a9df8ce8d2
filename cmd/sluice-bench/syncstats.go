package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// syncSample is what the durable edge's /metrics says of its group commit
// at one instant (fx's sluice_store_sync_* counters, and the edge's
// histogram of the time a hook waited on the barrier).
type syncSample struct {
	rounds, waits, seconds float64
	hookWaits, hookWaitSum float64
}

// sampleSync reads base's /metrics; ok is false when it cannot.
func sampleSync(ctx context.Context, base string) (syncSample, bool) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return syncSample{}, false
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return syncSample{}, false
	}
	defer res.Body.Close()
	var s syncSample
	fields := map[string]*float64{
		"sluice_store_sync_rounds_total":      &s.rounds,
		"sluice_store_sync_waits_total":       &s.waits,
		"sluice_store_sync_seconds_total":     &s.seconds,
		"sluice_edge_sync_wait_seconds_count": &s.hookWaits,
		"sluice_edge_sync_wait_seconds_sum":   &s.hookWaitSum,
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if p := fields[name]; ok && p != nil {
			*p, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
		}
	}
	return s, res.StatusCode == http.StatusOK
}

// syncLine says what the group commit did between a and b: rounds, the
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
	}
	return line
}
