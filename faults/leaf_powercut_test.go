package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
)

// edgeHubCuts is how many power cuts of the hub TestLeafHubPowerCut makes.
const edgeHubCuts = 3

// TestLeafHubPowerCut: the hub's copy of a forwarded hook. A single-node
// hub (its data dir on a lazyfs mount: what it did not sync is lost by a
// cut) takes an edge's forwarded hooks under load; again and again, kill
// -9 of the hub and a power cut at once, and a restart on what its disk
// kept, the edge (on a disk of its own, never cut) answering 202 from its
// outbox all along. Then, the hub back and the edge drained, every hook
// the edge answered 202 must be in the hub's HOOKS: an edge drops its
// outbox copy of a hook only once the hub has it on disk.
func TestLeafHubPowerCut(t *testing.T) {
	bin, _ := binaries(t)
	heavy <- struct{}{}
	defer func() { <-heavy }()
	fs, mnt, _ := powerCutMount(t)
	ports := testkit.FreePorts(t, 2)
	hubNATS, leaf := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	hubDir, edgeDir := filepath.Join(mnt, "hub"), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte("defaults:\n  limits: {hooks: {rate: 100000, burst: 100000}, bytes: {rate: 1000000000, burst: 1000000000}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubLeaf, edgeLeaf := leafArgs(t, leaf)
	hubArgs := append([]string{"--data-dir", hubDir, "--nats-listen", hubNATS, "--config", cfgPath}, hubLeaf...)
	edgeArgs := append([]string{"--data-dir", edgeDir, "--nats-listen", "off", "--leaf-name", "e1", "--config", cfgPath}, edgeLeaf...)

	hub := startEdgeProc(t, bin, "hub", hubArgs...)
	ed := startEdgeProc(t, bin, "edge", edgeArgs...)
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
	hubStored := func() jetstream.StreamState {
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
		return info.State
	}
	// edgeMetrics are the edge's forwarding counters.
	edgeMetrics := func() string {
		res, err := http.Get(ed.url + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "sluice_edge_forwarded_total{") || strings.HasPrefix(l, "sluice_edge_hub_syncs_total{") {
				out = append(out, l)
			}
		}
		return strings.Join(out, ", ")
	}
	waitStatus("linked", 15*time.Second, func(s edgeStatus) bool { return s.Edge.Linked })

	l := NewLedger()
	n := scale(edgePhase)
	for c := range edgeHubCuts {
		// A phase of load, then the cut as soon as the edge has forwarded
		// all of it: the last batches reached the hub after its own last
		// synced writes (the hub's owners sync the claims of the edge's
		// hits, and HOOKS with them, while the load runs), so only the
		// hub's record round (within a second) or the edges' barrier
		// makes them durable there.
		load := startEdgeLoadKeys(l, func() string { return ed.url }, 8, fmt.Sprintf("cut%d", c))
		load.waitAccepted(t, fmt.Sprintf("before cut %d", c), n, 30*time.Second, func(edgeAnswer) bool { return true })
		load.stop()
		s := waitStatus("drained", 30*time.Second, func(s edgeStatus) bool { return s.Edge.Linked && s.Edge.Backlog == 0 })
		before := hubStored()
		hub.p.kill()
		loss, err := fs.Cut()
		if err != nil {
			t.Fatalf("cut %d: %v", c, err)
		}
		hub = startEdgeProc(t, bin, "hub", hubArgs...)
		after := hubStored()
		t.Logf("cut %d: the hub's HOOKS held %d hooks (seq %d-%d) before the cut, %d (seq %d-%d) after it (edge backlog then %d); the cut dropped %d bytes of %d files; edge: %s",
			c, before.Msgs, before.FirstSeq, before.LastSeq, after.Msgs, after.FirstSeq, after.LastSeq, s.Edge.Backlog, loss.Bytes, loss.Files, edgeMetrics())
		waitStatus("linked again", 30*time.Second, func(s edgeStatus) bool { return s.Edge.Linked })
	}
	js := testkit.JetStream(t, testkit.Dial(t, "nats://"+hubNATS))
	var r Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = l.Check(storedOn(t, js))
		if len(r.Missing)+len(r.UnknownDuplicate) == 0 || time.Now().After(deadline) {
			break
		}
	}
	s := waitStatus("drained", 30*time.Second, func(s edgeStatus) bool { return s.Edge.Linked && s.Edge.Backlog == 0 })
	t.Logf("%d cuts of the hub: hooks: %s; answers by status %v; edge backlog %d; edge: %s", edgeHubCuts, r, l.Codes(), s.Edge.Backlog, edgeMetrics())
	if len(r.Missing) > 0 {
		t.Errorf("%d of %d hooks the edge answered 202 are neither in the hub's HOOKS nor in the edge's outbox: the hub lost them in a power cut after the edge dropped its copy",
			len(r.Missing), r.Accepted)
	}
	for _, v := range r.Violations(true) {
		t.Errorf("invariant broken: %s", v)
	}
}
