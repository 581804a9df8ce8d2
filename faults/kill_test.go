package faults

import (
	"strconv"
	"testing"
	"time"
)

// TestKillNode kill -9s one of three edge processes of a single-binary
// cluster (each embeds one of three clustered nats-servers: R3 streams and
// buckets) under load, restarts it on its data directory, and checks that
// every hook answered 2xx is in the HOOKS stream, that every key has one
// winner, and that the fleet serves every partition again.
func TestKillNode(t *testing.T) {
	t.Parallel()
	h := Start(t, Options{Embedded: true})
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: []string{"a", "b", "c", "d", "e", "f"}, Workers: 12, Redeliver: true})
	defer run.stop()
	killStep(t, run, "before the kill")
	const victim = 1
	h.Node(victim).Kill()
	killed := time.Now()
	killStep(t, run, "after the kill")
	h.WaitServed(t, 30*time.Second, h.AllPartitions()...)
	t.Logf("node %d killed: every partition served again %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
	start := time.Now()
	h.Node(victim).Restart(t)
	t.Logf("node %d restarted in %v", victim, time.Since(start).Round(time.Millisecond))
	killStep(t, run, "after the restart")
	run.stop()
	t.Logf("load: %s", run)
	h.CheckHooks(t, l, false)
}

// TestKillServer kill -9s one of three nats-server processes (R3 streams
// and buckets) under hook and replay load, restarts it on its store
// directory, and checks the hooks, every replay nonce (claimed once,
// refused on replay, across the kill) and that the restarted server
// catches up. The node connected to the killed server
// fails over to another server of the cluster.
func TestKillServer(t *testing.T) {
	t.Parallel()
	// Above the run's volume (measured about 2,000 nonces): "full" is a
	// violation here.
	const capacity = 100_000
	h := Start(t, Options{ServerProcs: true, NodeProcs: true, Args: []string{"--replay-capacity", strconv.Itoa(capacity)}})
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: []string{"a", "b", "c", "d", "e", "f"}, Workers: 12, Redeliver: true})
	defer run.stop()
	rp := h.startReplay(capacity, 4)
	defer rp.stop()
	killStep(t, run, "before the kill")
	const victim = 1
	h.KillServer(victim)
	killed := time.Now()
	killStep(t, run, "after the kill")
	t.Logf("server %d killed: 200 more hooks accepted %v after the kill", victim, time.Since(killed).Round(time.Millisecond))
	start := time.Now()
	h.RestartServer(t, victim)
	t.Logf("server %d restarted in %v", victim, time.Since(start).Round(time.Millisecond))
	killStep(t, run, "after the restart")
	h.waitCurrent(t, 60*time.Second)
	t.Logf("every stream replica current %v after the restart", time.Since(start).Round(time.Millisecond))
	run.stop()
	for _, v := range rp.stop() {
		t.Errorf("invariant broken: %s", v)
	}
	if rp.replays.Load() == 0 || rp.Claimed() == 0 {
		t.Errorf("replay load not exercised: %s", rp)
	}
	t.Logf("load: %s", run)
	t.Logf("%s", rp)
	h.CheckHooks(t, l, false)
}

// killStep waits, at each step of a kill test (what), until another
// scale(200) hooks of run were answered 2xx.
func killStep(t *testing.T, run *loadRun, what string) {
	t.Helper()
	if err := run.waitAccepted(int64(scale(200)), scaleD(30*time.Second)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
