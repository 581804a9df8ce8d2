package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

func TestTailStages(t *testing.T) {
	h := "sluice_edge_sync_wait_seconds"
	a := map[string]float64{h + "_count": 10, h + `_bucket{le="0.005"}`: 9, h + `_bucket{le="0.05"}`: 10}
	b := map[string]float64{h + "_count": 110, h + `_bucket{le="0.005"}`: 99, h + `_bucket{le="0.05"}`: 108}
	for _, st := range tailStages(a, b) {
		if st.Stage == "sync_wait" && (st.Count != 100 || st.Over5 != 10 || st.Over50 != 2) {
			t.Errorf("sync_wait: %+v, want 100 observed, 10 over 5 ms, 2 over 50 ms", st)
		}
	}
	if _, err := parseOptions([]string{"--workloads", "tail", "--tail-rate", "0"}, &bytes.Buffer{}); err == nil {
		t.Error("--tail-rate 0 accepted")
	}
}

// TestTailRuns runs the tail workload briefly against a real cmd/edge:
// every paced hook answered and counted, and the HOOKS check done.
func TestTailRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the tail test builds and starts cmd/edge")
	}
	rep, _ := runBench(t, 3*time.Minute, "--workloads", "tail", "--tail-rate", "200", "--duration", "1s", "--warmup", "200ms", "--slices", "2")
	r := rep.Tail
	if r == nil || r.Error != "" {
		t.Fatalf("tail result %+v", r)
	}
	if r.All.Sent != 200 || len(r.Slices) != 2 || r.Slices[0].Sent+r.Slices[1].Sent != 200 {
		t.Errorf("sent %d in %d slices, want 200 in 2", r.All.Sent, len(r.Slices))
	}
	if r.Statuses["202"] != 200 || r.Stored < 200 {
		t.Errorf("answers %v, HOOKS %d: want 200 × 202 stored", r.Statuses, r.Stored)
	}
	if len(r.Stages) != 3 || r.Stages[0].Count < 100 || !strings.Contains(r.Rounds, "rounds") {
		t.Errorf("stages %+v, barrier %q: want the edge's histograms read", r.Stages, r.Rounds)
	}
}

func TestDiskRuns(t *testing.T) {
	var out, log bytes.Buffer
	o, err := parseOptions([]string{"--workloads", "disk", "--duration", "300ms"}, &log)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{o: o, out: &out, log: &log, self: os.Getpid()}
	rep, err := b.run(context.Background())
	b.close()
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Disk
	if d == nil || d.Syncs < 10 || d.P50Us <= 0 || d.MaxUs < d.P99Us || d.P99Us < d.P50Us {
		t.Fatalf("disk result %+v: want syncs measured", d)
	}
	if !strings.Contains(out.String(), "fdatasyncs") {
		t.Errorf("output %q names no fdatasyncs", out.String())
	}
}
