package faults

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestOwnerDies kill -9s the node that owns some tenants' partitions
// while those tenants (and control tenants owned elsewhere) send well above
// their limit, and measures (1) how long until the partitions are served
// again and (2) how many hooks each tenant got accepted beyond what its
// limit allows over the run (burst + rate × duration), in bursts. The goal
// is at most one extra burst per tenant (the new owner starts with full
// buckets); the numbers are logged. The test fails only beyond the bound
// the design states for a degraded fleet (N × the limit: each node's
// local fallback plus the new owner).
func TestOwnerDies(t *testing.T) {
	t.Parallel()
	const rate, burst = 1.0, 20
	yaml := fmt.Sprintf("allow_unknown: true\ndefaults:\n  limits: {hooks: {rate: %v, burst: %d}, bytes: {rate: 1000000000, burst: 1000000000}}\n", rate, burst)
	h := Start(t, Options{NodeProcs: true, YAML: yaml})
	const victim = 2
	var victimParts, otherParts []int
	for _, n := range h.AllPartitions() {
		if h.Owner(n) == victim {
			victimParts = append(victimParts, n)
		} else if h.Owner(n) >= 0 {
			otherParts = append(otherParts, n)
		}
	}
	if len(victimParts) == 0 || len(otherParts) == 0 {
		t.Fatalf("partitions: victim owns %v, others %v", victimParts, otherParts)
	}
	var affected, control []string
	for _, n := range victimParts[:min(3, len(victimParts))] {
		affected = append(affected, h.Principal("ten", n))
	}
	for _, n := range otherParts[:min(2, len(otherParts))] {
		control = append(control, h.Principal("ten", n))
	}
	tenants := append(slices.Clone(affected), control...)
	l := NewLedger()
	begin := time.Now()
	run := h.startHooks(l, hookLoad{Tenants: tenants, Workers: 2 * len(tenants), Pace: 20 * time.Millisecond, MaxTries: 1})
	defer run.stop()
	time.Sleep(scaleD(2 * time.Second)) // every tenant spends its burst and runs at its rate
	h.Node(victim).Kill()
	killed := time.Now()
	took := h.WaitServed(t, 30*time.Second, victimParts...)
	t.Logf("owner (node %d) killed: its %d partitions served again after %v", victim, len(victimParts), took.Round(time.Millisecond))
	time.Sleep(scaleD(2 * time.Second))
	run.stop()
	elapsed := time.Since(begin).Seconds()
	t.Logf("load: %s over %.1f s (the owner was killed at %.1f s)", run, elapsed, killed.Sub(begin).Seconds())
	allowed := float64(burst) + rate*elapsed
	worst := 0.0
	for _, tn := range tenants {
		got := run.perTen[tn]
		over := (float64(got) - allowed) / burst
		kind := "control"
		if slices.Contains(affected, tn) {
			kind = "affected"
			worst = math.Max(worst, over)
		}
		t.Logf("tenant %s (%s, partition owner %s): %d accepted, %.0f allowed: over-admission %+.2f bursts", tn, kind, map[bool]string{true: "killed", false: "alive"}[kind == "affected"], got, allowed, over)
		// A control tenant's owner is alive, but a hit it answers after the
		// caller's budget (the failover saturates two cores) falls back to
		// the node-local limiter: a fraction of a burst can pass on top
		// (measured up to +0.16). More than half a burst is a fault.
		if kind == "control" && over > 0.5 {
			t.Errorf("control tenant %s over its limit by %.2f bursts", tn, over)
		}
	}
	// The design's bound while degraded: each of the N nodes may admit a
	// limit from local state, and the new owner starts with a full bucket.
	if bound := float64(len(h.Nodes())) + 1; worst > bound {
		t.Errorf("over-admission %.2f bursts, above the degraded bound of %.0f", worst, bound)
	}
	h.CheckHooks(t, l, false)
	h.LogSummary(t)
}
