package faults

import (
	"testing"
	"time"
)

// TestKillNode kill -9s one of three edge processes under load, restarts
// it on its data directory, and checks that every hook answered 2xx is in
// the HOOKS stream (R3) and that the fleet serves every partition again.
func TestKillNode(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	h := Start(t, Options{NodeProcs: true})
	t.Logf("harness up in %v", time.Since(t0))
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: []string{"a", "b", "c", "d", "e", "f"}, Workers: 12, Redeliver: true})
	defer run.stop()
	step := func(what string) {
		t.Helper()
		if err := run.waitAccepted(200, 30*time.Second); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("before the kill")
	const victim = 1
	h.Node(victim).Kill()
	killed := time.Now()
	step("after the kill")
	served := h.WaitServed(t, 30*time.Second, h.AllPartitions()...)
	t.Logf("node %d killed: every partition served again %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
	_ = served
	start := time.Now()
	h.Node(victim).Restart(t)
	t.Logf("node %d restarted in %v", victim, time.Since(start).Round(time.Millisecond))
	step("after the restart")
	run.stop()
	t.Logf("load: %s", run)
	for _, e := range run.protocolErrors() {
		t.Errorf("malformed answer: %s", e)
	}
	h.CheckHooks(t, l, true)
}
