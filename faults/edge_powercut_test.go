package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/testkit"
)

// edgeHubCuts is how many power cuts of the hub TestEdgeHubPowerCut makes.
const edgeHubCuts = 3

// TestEdgeHubPowerCut: the hub's copy of a forwarded hook. A single-node
// hub (its data dir on a lazyfs mount: what it did not sync is lost by a
// cut) takes an edge's forwarded hooks under load; again and again, kill
// -9 of the hub and a power cut at once, and a restart on what its disk
// kept, the edge (on a disk of its own, never cut) answering 202 from its
// outbox all along. Then, the hub back and the edge drained, every hook
// the edge answered 202 must be in the hub's HOOKS: an edge drops its
// outbox copy of a hook only once the hub has it on disk.
func TestEdgeHubPowerCut(t *testing.T) {
	bin, _ := binaries(t)
	heavy <- struct{}{}
	defer func() { <-heavy }()
	fs, mnt, _ := powerCutMount(t)
	ports := testkit.FreePorts(t, 2)
	hubNATS, leaf := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	token := "faults-leaf-token-0123456789"
	hubDir, edgeDir := filepath.Join(mnt, "hub"), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte("defaults:\n  limits: {hooks: {rate: 100000, burst: 100000}, bytes: {rate: 1000000000, burst: 1000000000}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubArgs := []string{"--data-dir", hubDir, "--nats-listen", hubNATS, "--js-domain", "hub", "--leaf-listen", leaf, "--config", cfgPath}
	edgeArgs := []string{"--data-dir", edgeDir, "--nats-listen", "off", "--hub-url", "nats-leaf://" + leaf, "--edge-name", "e1", "--config", cfgPath}

	hub := startEdgeProc(t, bin, "hub", token, hubArgs...)
	ed := startEdgeProc(t, bin, "edge", token, edgeArgs...)
	waitStatus := func(what string, timeout time.Duration, ok func(edgeStatus) bool) edgeStatus {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			s, code, err := readyz(ed.url)
			if err == nil && code == 200 && ok(s) {
				return s
			}
			if time.Now().After(deadline) {
				t.Fatalf("edge: not %s within %s (last %+v, %d, %v)", what, timeout, s, code, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	hubStored := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		nc := testkit.Dial(t, "nats://"+hubNATS)
		defer nc.Close()
		st, err := testkit.JetStream(t, nc).Stream(ctx, "HOOKS")
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	waitStatus("linked", 15*time.Second, func(s edgeStatus) bool { return s.Edge.Linked })

	l := NewLedger()
	load := startEdgeLoad(l, func() string { return ed.url }, 8)
	n := scale(edgePhase)
	since := time.Now()
	for c := range edgeHubCuts {
		load.waitAccepted(t, fmt.Sprintf("before cut %d", c), n, 30*time.Second, func(a edgeAnswer) bool { return a.sent.After(since) })
		// Forwarding: the hub holds (in its page cache at least) what
		// the edge forwarded; the cut comes in the middle of it.
		s := waitStatus("forwarding", 10*time.Second, func(s edgeStatus) bool { return s.Edge.Linked && s.Edge.Backlog < 200 })
		before := hubStored()
		hub.p.kill()
		loss, err := fs.Cut()
		if err != nil {
			t.Fatalf("cut %d: %v", c, err)
		}
		hub = startEdgeProc(t, bin, "hub", token, hubArgs...)
		after := hubStored()
		t.Logf("cut %d: the hub's HOOKS held %d hooks before the cut, %d after it (edge backlog then %d); the cut dropped %d bytes of %d files",
			c, before, after, s.Edge.Backlog, loss.Bytes, loss.Files)
		waitStatus("linked again", 30*time.Second, func(s edgeStatus) bool { return s.Edge.Linked })
		since = time.Now()
	}
	load.waitAccepted(t, "after the last cut", n, 30*time.Second, func(a edgeAnswer) bool { return a.sent.After(since) })
	load.stop()
	js := testkit.JetStream(t, testkit.Dial(t, "nats://"+hubNATS))
	var r Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = l.Check(storedOn(t, js))
		if len(r.Missing)+len(r.UnknownDuplicate) == 0 || time.Now().After(deadline) {
			break
		}
	}
	s := waitStatus("drained", 30*time.Second, func(s edgeStatus) bool { return s.Edge.Linked && s.Edge.Backlog == 0 })
	t.Logf("%d cuts of the hub: hooks: %s; answers by status %v; edge backlog %d", edgeHubCuts, r, l.Codes(), s.Edge.Backlog)
	if len(r.Missing) > 0 {
		t.Errorf("%d of %d hooks the edge answered 202 are neither in the hub's HOOKS nor in the edge's outbox: the hub lost them in a power cut after the edge dropped its copy",
			len(r.Missing), r.Accepted)
	}
	for _, v := range r.Violations(true) {
		t.Errorf("invariant broken: %s", v)
	}
}
