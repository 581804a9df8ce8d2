package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPowerCutCluster: three embedded nodes, every data dir on one lazyfs
// mount (one rack, one power feed), load on all three, then kill -9 of
// every node and a cut of every disk at once, and all three started again
// together. At the default durability (synced) every hook answered 2xx is
// in its stream after each cut and its key answers a redelivery as a
// duplicate, and a cluster whose every node lost its store refuses to
// start: at R3 a quorum fsyncs each Raft append before the ack; at R1
// (three shards, one on each server) a 2xx waits for the cluster's group
// commit, a round of every server's own. That the harness bites is
// checked at every cut: it must drop bytes that were not synced.
func TestPowerCutCluster(t *testing.T) {
	t.Parallel()
	cuts := 1
	if *longRun {
		cuts = 4
	}
	t.Run("synced", func(t *testing.T) { powerCutCluster(t, cuts, 3) })
	t.Run("synced-R1", func(t *testing.T) { powerCutCluster(t, cuts, 1) })
}

func powerCutCluster(t *testing.T, cuts, replicas int) {
	fs, mnt, _ := powerCutMount(t)
	o := Options{Servers: 3, Embedded: true, DataDir: mnt, Replicas: replicas}
	tenants := []string{"a", "b", "c", "d"}
	if replicas == 1 {
		o.Partitions, o.Shards = 6, 3
		tenants = shardTenants(3, 2)
	}
	h := Start(t, o)
	l := NewLedger()
	var tot powerCutTotals
	for c := range cuts {
		prefix := fmt.Sprintf("ccut%d-", c)
		run := h.startHooks(l, hookLoad{Tenants: tenants, Workers: 12, Prefix: prefix[:len(prefix)-1]})
		if err := run.waitAccepted(int64(scale(300)), scaleD(60*time.Second)); err != nil {
			run.stop()
			t.Fatalf("cut %d: %v", c, err)
		}
		for _, n := range h.Nodes() {
			n.Kill()
		}
		run.stop()
		loss, err := fs.Cut()
		if err != nil {
			t.Fatalf("cut %d: %v", c, err)
		}
		if loss.Bytes == 0 {
			t.Fatalf("cut %d dropped nothing: the harness does not bite", c)
		}
		errs := h.restartAll()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("cut %d: restart: %v", c, err)
		}
		cut := h.afterCut(t, l, prefix)
		tot.add(cut)
		t.Logf("cut %d: %d hooks answered 2xx, %d lost; redelivered: %d duplicate (%d of them naming a lost hook), %d stored anew, %d other; the cut dropped %d bytes of %d files",
			c, cut.acked, cut.lost, cut.dup, cut.dupLost, cut.fresh, cut.other, loss.Bytes, loss.Files)
	}
	if tot.acked == 0 {
		t.Fatal("no hook answered 2xx")
	}
	if tot.lost > 0 || tot.dupLost > 0 || tot.fresh+tot.other > 0 {
		t.Errorf("%d of %d hooks answered 2xx lost by whole-cluster power cuts, %d redeliveries not answered as duplicates", tot.lost, tot.acked, tot.fresh+tot.other)
	}
	h.CheckHooks(t, l, false)
	refusesEmptyCluster(t, h)
}

// hooksMissing is a refusal naming a hooks stream (a shard's at R1: the
// node's own).
var hooksMissing = regexp.MustCompile(`stream HOOKS(_[0-9]+)? is missing`)

func refusesEmptyCluster(t *testing.T, h *Harness) {
	// A cluster whose every node lost what it had recorded (each store
	// emptied, the records kept: disks swapped, a restore gone wrong)
	// refuses to start, naming HOOKS and the flag, and starts with it.
	for _, n := range h.Nodes() {
		n.Kill()
	}
	for _, n := range h.Nodes() {
		if err := os.RemoveAll(filepath.Join(n.dir, "jetstream")); err != nil {
			t.Fatal(err)
		}
	}
	refused := 0
	for i, err := range h.restartAll() {
		switch {
		case err == nil:
			t.Errorf("node %d came up on an empty store", i)
		case hooksMissing.MatchString(err.Error()) && strings.Contains(err.Error(), "--accept-data-loss=true"):
			refused++
		default:
			t.Errorf("node %d on an empty store: %v, want a refusal naming a hooks stream and --accept-data-loss", i, err)
		}
	}
	t.Logf("%d of 3 nodes refused to start on an emptied store", refused)
	for _, n := range h.Nodes() {
		if n.URL() != "" {
			n.Kill()
		}
	}
	h.o.Args = append(h.o.Args, "--accept-data-loss=true")
	if err := errors.Join(h.restartAll()...); err != nil {
		t.Fatalf("with --accept-data-loss: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if code, _, err := h.PostHook(ctx, 0, HookKey{"t", "s", "after-the-loss"}, hookBody); err != nil || code != 202 {
		t.Fatalf("a hook after the accepted loss: %d %v", code, err)
	}
}

// restartAll starts every node again at once (a node of a cluster waits
// at start for the others: one by one, the first would wait alone), and
// returns each one's start-up error.
func (h *Harness) restartAll() []error {
	errs := make([]error, len(h.nodes))
	var wg sync.WaitGroup
	for i, n := range h.nodes {
		wg.Go(func() { errs[i] = n.startProc() })
	}
	wg.Wait()
	return errs
}
