package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
)

// leafHubCuts is how many power cuts of the hub TestLeafHubPowerCut makes.
const leafHubCuts = 3

// TestLeafHubPowerCut: the hub's copy of a forwarded hook. A single-node
// hub (its data dir on a lazyfs mount: what it did not sync is lost by a
// cut) takes a leaf's forwarded hooks under load; again and again, kill
// -9 of the hub and a power cut at once, and a restart on what its disk
// kept, the leaf (on a disk of its own, never cut) answering 202 from its
// outbox all along. Then, the hub back and the leaf drained, every hook
// the leaf answered 202 must be in the hub's HOOKS: a leaf drops its
// outbox copy of a hook only once the hub has it on disk.
func TestLeafHubPowerCut(t *testing.T) {
	bin, _ := binaries(t)
	heavy <- struct{}{}
	defer func() { <-heavy }()
	fs, mnt, _ := powerCutMount(t)
	lp := startLeafPair(t, bin, filepath.Join(mnt, "hub"))
	hub, ed, hubArgs, hubNATS := lp.hub, lp.leaf, lp.hubArgs, lp.hubNATS
	waitStatus := func(what string, timeout time.Duration, ok func(leafStatus) bool) leafStatus {
		t.Helper()
		return waitLeafStatus(t, func() string { return ed.url }, what, timeout, ok)
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
	// leafMetrics are the leaf's forwarding counters.
	leafMetrics := func() string {
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
	waitStatus("linked", 15*time.Second, func(s leafStatus) bool { return s.Leaf.Linked })

	l := NewLedger()
	n := scale(leafPhase)
	for c := range leafHubCuts {
		// A phase of load, then the cut as soon as the leaf has forwarded
		// all of it: the last batches reached the hub after its own last
		// synced writes (the hub's owners sync the claims of the leaf's
		// hits, and HOOKS with them, while the load runs), so only the
		// hub's record round (within a second) or the leaves' barrier
		// makes them durable there.
		load := startLeafLoadKeys(l, func() string { return ed.url }, 8, fmt.Sprintf("cut%d", c))
		load.waitAccepted(t, fmt.Sprintf("before cut %d", c), n, 30*time.Second, func(leafAnswer) bool { return true })
		load.stop()
		s := waitStatus("drained", 30*time.Second, func(s leafStatus) bool { return s.Leaf.Linked && s.Leaf.Backlog == 0 })
		before := hubStored()
		hub.p.kill()
		loss, err := fs.Cut()
		if err != nil {
			t.Fatalf("cut %d: %v", c, err)
		}
		hub = startEdgeProc(t, bin, "hub", hubArgs...)
		after := hubStored()
		t.Logf("cut %d: the hub's HOOKS held %d hooks (seq %d-%d) before the cut, %d (seq %d-%d) after it (leaf backlog then %d); the cut dropped %d bytes of %d files; leaf: %s",
			c, before.Msgs, before.FirstSeq, before.LastSeq, after.Msgs, after.FirstSeq, after.LastSeq, s.Leaf.Backlog, loss.Bytes, loss.Files, leafMetrics())
		waitStatus("linked again", 30*time.Second, func(s leafStatus) bool { return s.Leaf.Linked })
	}
	js := testkit.JetStream(t, testkit.Dial(t, "nats://"+hubNATS))
	var r Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = l.Check(storedOn(t, js))
		if len(r.Missing)+len(r.UnknownDuplicate) == 0 || time.Now().After(deadline) {
			break
		}
	}
	s := waitStatus("drained", 30*time.Second, func(s leafStatus) bool { return s.Leaf.Linked && s.Leaf.Backlog == 0 })
	t.Logf("%d cuts of the hub: hooks: %s; answers by status %v; leaf backlog %d; leaf: %s", leafHubCuts, r, l.Codes(), s.Leaf.Backlog, leafMetrics())
	if len(r.Missing) > 0 {
		t.Errorf("%d of %d hooks the leaf answered 202 are neither in the hub's HOOKS nor in the leaf's outbox: the hub lost them in a power cut after the leaf dropped its copy",
			len(r.Missing), r.Accepted)
	}
	for _, v := range r.Violations(true) {
		t.Errorf("invariant broken: %s", v)
	}
}
