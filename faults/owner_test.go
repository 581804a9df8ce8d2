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
// limit allows over the run (burst + rate × duration), in bursts.
//
// Asserted near the measured values (2 vCPU shared with other test runs,
// -race): the partitions are served again within failoverBound (lease
// TTL + 3 s); control tenants stay within a quarter burst of their limit
// (measured -0.24..+0.20); affected tenants are over their limit by at
// most one burst: while no owner answers each
// surviving node's fallback applies 1/M of the limit (M live members, the
// dead one counted until it leaves the lease view), and the new owner
// starts the lapsed partition with an eighth of the burst per bucket
// rather than a full burst (see quota's tenure). Measured +0.20..+0.54
// bursts (3 runs, gaps of 4.2-4.8 s, other helpers' builds and benchmarks
// running); before, +2.05..+3.13.
//
// The load offers each affected tenant several times what a correct fleet
// admits during the gap (every hit waits out the 250 ms budget before the
// fallback answers it): with less, a fallback that admitted everything
// passed this test (found by breaking it on purpose).
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
	run := h.startHooks(l, hookLoad{Tenants: tenants, Workers: 12 * len(tenants), Pace: 100 * time.Millisecond, MaxTries: 1})
	defer run.stop()
	// Every tenant spends its burst and runs at its rate.
	if err := run.waitDenied(tenants, nil, scaleD(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	h.Node(victim).Kill()
	killed := time.Now()
	took := h.WaitServed(t, 30*time.Second, victimParts...)
	t.Logf("owner (node %d) killed: its %d partitions served again after %v", victim, len(victimParts), took.Round(time.Millisecond))
	if took > failoverBound {
		t.Errorf("partitions served again after %v, above %v", took, failoverBound)
	}
	// The new owner's full buckets are spent: every affected tenant is
	// rate limited again after its partition was served.
	if err := run.waitDenied(affected, run.deniedNow(), scaleD(30*time.Second)); err != nil {
		t.Fatal(err)
	}
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
		// (measured -0.05..+0.16). More than a quarter burst is a fault.
		if kind == "control" && over > 0.25 {
			t.Errorf("control tenant %s over its limit by %.2f bursts", tn, over)
		}
	}
	// The goal: at most one burst over the limit.
	t.Logf("over-admission: worst %.2f bursts (bound 1)", worst)
	if worst > 1 {
		t.Errorf("over-admission %.2f bursts, above one burst", worst)
	}
	h.CheckHooks(t, l, false)
	h.LogSummary(t)
}
