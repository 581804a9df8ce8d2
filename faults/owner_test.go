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
// again and (2) how many hooks each tenant got admitted beyond what its
// limit allows over the run (burst + rate × duration), in bursts.
// Admissions are counted where they land: the hooks in HOOKS under the
// tenant's Sluice-Tenant header, not the 202s the clients saw — a hook
// stored by a node whose answer the kill cut off counts too.
//
// Asserted (2 vCPU shared with other test runs, -race): the partitions
// are served again within failoverBound (lease TTL + 3 s); affected
// tenants are over their limit by at most one burst:
// while no owner answers each surviving node's fallback applies 1/M of the
// limit (M live members, the dead one counted until it leaves the lease
// view), and the new owner starts the lapsed partition with an eighth of
// the burst per bucket rather than a full burst (see quota's tenure).
// Control tenants stay within controlBound, derived below. Measured over
// 3 runs counted from HOOKS (other helpers' builds and tests running, load
// about 4): affected +0.64 bursts each time (38 hooks in HOOKS, 34–38 of
// them answered 202), control −0.06..−0.01, gaps 4.88–4.92 s; counted
// from the answers instead affected +0.20..+0.54, control
// −0.24..+0.20; before the 1/M fallback share, affected +2.05..+3.13.
//
// The load offers each affected tenant several times what a correct fleet
// admits during the gap (every hit waits out the 250 ms budget before the
// fallback answers it): with less, a fallback that admitted everything
// passed this test (found by breaking it on purpose).
func TestOwnerDies(t *testing.T) {
	t.Parallel()
	const rate, burst = 1.0, 20
	const nodes = 3
	// controlBound, in bursts: a control tenant's owner stays alive, so
	// what the fleet admits for it stays within burst + rate × run. Only a
	// hit its owner answers after the owner's part of the budget (the
	// takeover saturates the two cores) falls back to a surviving node's
	// local limiter, and that holds 1/M of the limit: during the gap M
	// still counts the dead member (it leaves the lease view a lease TTL
	// plus a renewal after its last heartbeat, the length of the gap), so
	// M = nodes. Each of the nodes-1 surviving nodes' share then admits
	// its burst/M once, refilled at rate/M while its answers are late —
	// at most the gap, failoverBound. Together:
	//   (nodes-1) × (burst + rate × failoverBound) / M  =  2 × (20 + 8) / 3
	//   = 18.7 hooks = 0.93 bursts,
	// far above any control measured (at most +0.20, see above: 4 hooks),
	// and below the one burst a control partition would gain if a
	// failover gave it a fresh bucket.
	controlBound := float64(nodes-1) * (burst + rate*failoverBound.Seconds()) / nodes / burst
	yaml := fmt.Sprintf("allow_unknown: true\ndefaults:\n  limits: {hooks: {rate: %v, burst: %d}, bytes: {rate: 1000000000, burst: 1000000000}}\n", rate, burst)
	h := Start(t, Options{Servers: nodes, NodeProcs: true, YAML: yaml})
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
	stored := h.Stored(t)
	admitted := map[string]int{}
	for _, s := range stored {
		admitted[s.Tenant]++
	}
	allowed := float64(burst) + rate*elapsed
	worst := 0.0
	for _, tn := range tenants {
		got := admitted[tn]
		over := (float64(got) - allowed) / burst
		kind := "control"
		if slices.Contains(affected, tn) {
			kind = "affected"
			worst = math.Max(worst, over)
		}
		t.Logf("tenant %s (%s, partition owner %s): %d in HOOKS (%d answered 202), %.0f allowed: over-admission %+.2f bursts",
			tn, kind, map[bool]string{true: "killed", false: "alive"}[kind == "affected"], got, run.perTen[tn], allowed, over)
		if kind == "control" && over > controlBound {
			t.Errorf("control tenant %s over its limit by %.2f bursts, above %.2f", tn, over, controlBound)
		}
	}
	// The goal: at most one burst over the limit.
	t.Logf("over-admission: worst affected %.2f bursts (bound 1), control bound %.2f", worst, controlBound)
	if worst > 1 {
		t.Errorf("over-admission %.2f bursts, above one burst", worst)
	}
	h.CheckStored(t, l, stored, false)
	h.LogSummary(t)
}
