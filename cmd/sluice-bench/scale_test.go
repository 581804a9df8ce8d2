package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFleetCPU(t *testing.T) {
	a := fleetCPU([]time.Duration{300 * time.Millisecond, 100 * time.Millisecond}, 1000, 0.4, time.Second)
	if a.total != 400*time.Millisecond || a.perHookUs != 400 {
		t.Fatalf("total %v, per hook %v µs; want 400 ms, 400 µs", a.total, a.perHookUs)
	}
	if len(a.shares) != 2 || a.shares[0] != 0.75 || a.shares[1] != 0.25 {
		t.Fatalf("shares %v, want [0.75 0.25]", a.shares)
	}
	if len(a.quotaUse) != 2 || math.Abs(a.quotaUse[0]-0.75) > 1e-9 || math.Abs(a.quotaUse[1]-0.25) > 1e-9 {
		t.Fatalf("quota use %v, want [0.75 0.25] (300 and 100 ms of 0.4 core × 1 s)", a.quotaUse)
	}
	if a := fleetCPU([]time.Duration{time.Second}, 0, 0, time.Second); a.perHookUs != 0 || a.quotaUse != nil {
		t.Fatalf("no hooks, no quota: %+v", a)
	}
}

func TestParseScaleRows(t *testing.T) {
	got, err := parseScaleRows("1/1/0.4, 3/R3/0.25,6/3/0/acked,3/1/0.4/s3,3/3/0.4/acked/s3,3/1/0.4/s3/leader")
	if err != nil {
		t.Fatal(err)
	}
	want := []scaleSpec{{1, 1, 0.4, "", 0, false}, {3, 3, 0.25, "", 0, false}, {6, 3, 0, "acked", 0, false}, {3, 1, 0.4, "", 3, false}, {3, 3, 0.4, "acked", 3, false}, {3, 1, 0.4, "", 3, true}}
	if len(got) != len(want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%v, want %v", got, want)
		}
	}
	for _, bad := range []string{"", "3/3", "1/3/0.4", "0/1/0.4", "3/1/-1", "a/b/c", "3/3/0.4/", "3/3/0.4/acked/x", "3/1/0.4/s0", "3/1/0.4/s17", "3/1/0.4/s3/s3/acked", "1/1/0.4/leader", "3/1/0.4/leader/leader/s3"} {
		if _, err := parseScaleRows(bad); err == nil {
			t.Errorf("parseScaleRows(%q): want an error", bad)
		}
	}
	if _, err := parseScaleRows(defaultScaleRows); err != nil {
		t.Fatalf("the default rows: %v", err)
	}
}

func TestScaleRatios(t *testing.T) {
	rows := []scaleRow{
		{Run: 1, Nodes: 1, Replicas: 1, QuotaCores: 0.4, Hooks: 1, HooksPerSec: 1000},
		{Run: 1, Nodes: 3, Replicas: 3, QuotaCores: 0.4, Hooks: 1, HooksPerSec: 1500},
		{Run: 1, Nodes: 6, Replicas: 3, QuotaCores: 0.4, Hooks: 1, HooksPerSec: 3000},
		{Run: 1, Nodes: 3, Replicas: 1, QuotaCores: 0.4, Hooks: 1, HooksPerSec: 9000, HostSaturated: true},
		{Run: 1, Nodes: 3, Replicas: 1, QuotaCores: 0.25, Hooks: 1, HooksPerSec: 900}, // no 1-node row at 0.25
		{Run: 2, Nodes: 3, Replicas: 3, QuotaCores: 0.4, Hooks: 1, HooksPerSec: 1500}, // no 1-node row in run 2
		// acked rows: against the 1-node acked row where there is one…
		{Run: 1, Nodes: 1, Replicas: 1, QuotaCores: 0.4, Durability: "acked", Hooks: 1, HooksPerSec: 2000},
		{Run: 1, Nodes: 3, Replicas: 3, QuotaCores: 0.4, Durability: "acked", Hooks: 1, HooksPerSec: 3000},
		// … else against the default one; and a 6-node row without its 3-node row.
		{Run: 1, Nodes: 3, Replicas: 1, QuotaCores: 0.4, Durability: "x", Hooks: 1, HooksPerSec: 500},
		{Run: 1, Nodes: 6, Replicas: 3, QuotaCores: 0.4, Durability: "x", Hooks: 1, HooksPerSec: 500},
	}
	scaleRatios(rows)
	for i, want := range [][2]float64{{1, 0}, {1.5, 0}, {3, 2}, {0, 0}, {0, 0}, {0, 0}, {1, 0}, {1.5, 0}, {0.5, 0}, {0.5, 0}} {
		if rows[i].VsOneNode != want[0] || rows[i].VsThreeNodes != want[1] {
			t.Errorf("row %d: vs one %v, vs three %v; want %v", i, rows[i].VsOneNode, rows[i].VsThreeNodes, want)
		}
	}
}

// TestScaleOneNode runs the scale workload for a moment: one real node
// under a CPU quota, and checks what it reports: hooks stored, every 202
// in the HOOKS stream, CPU accounted, and nothing left behind (processes:
// goleak and the node's exit; cgroups; data dirs).
func TestScaleOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the scale test builds and starts cmd/edge")
	}
	if _, err := findCPUCgroups(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	prof := t.TempDir()
	rep, out := runBench(t, 5*time.Minute, "--workloads", "scale", "--scale-rows", "1/1/0.4", "--duration", "1500ms", "--warmup", "500ms", "--scale-profile", prof)
	for _, root := range []string{"/sys/fs/cgroup/cpu", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		left, _ := filepath.Glob(filepath.Join(root, cgroupPrefix+strconv.Itoa(os.Getpid())+"-*"))
		if len(left) > 0 {
			t.Errorf("cgroups left behind: %v", left)
		}
	}
	if len(rep.Scale) != 1 {
		t.Fatalf("%d scale rows, want 1", len(rep.Scale))
	}
	r := rep.Scale[0]
	if r.Error != "" {
		t.Fatalf("row error: %s", r.Error)
	}
	switch {
	case r.Nodes != 1 || r.Replicas != 1 || r.QuotaCores != 0.4 || r.Workers != 24 || r.Cgroup == "":
		t.Errorf("row settings: %+v", r)
	case r.Hooks == 0 || r.HooksPerSec <= 0 || r.Seconds < 1:
		t.Errorf("no hooks measured: %d in %.2f s (%.0f/s)", r.Hooks, r.Seconds, r.HooksPerSec)
	case r.Answered202 < r.Hooks || r.StreamMsgs != r.Answered202 || r.Lost != 0:
		t.Errorf("hooks counted %d in the window, %d answered 202 in the row, %d in the HOOKS stream, %d lost: want the stream to hold every 202",
			r.Hooks, r.Answered202, r.StreamMsgs, r.Lost)
	case r.FleetCPUSec <= 0 || r.FleetCPUPerHookUs <= 0:
		t.Errorf("no fleet CPU: %v s, %v µs per hook", r.FleetCPUSec, r.FleetCPUPerHookUs)
	case len(r.NodeCPUShare) != 1 || r.NodeCPUShare[0] != 1 || len(r.NodeQuotaUse) != 1:
		t.Errorf("node shares %v, quota use %v", r.NodeCPUShare, r.NodeQuotaUse)
	case r.HostIdle < 0 || r.HostIdle > 1:
		t.Errorf("host idle %v, want 0..1", r.HostIdle)
	case r.Durability == "":
		t.Errorf("no durability from /readyz")
	}
	// Under a 0.4-core quota the node cannot have used (much) more than
	// 0.4 core: the quota was in force. (CFS lets a period's quota run
	// late by a little; 1.25 leaves room for that and the sampling.)
	if u := r.NodeQuotaUse[0]; u > 1.25 || u <= 0 {
		t.Errorf("the node used %.0f%% of its quota's time", 100*u)
	}
	if !strings.Contains(out, "| 1 | 1 | R1 | 1 | 0.40 core |") {
		t.Errorf("no table row for 1/R1/0.4 in:\n%s", out)
	}
	// The node's profile, accounted: its HTTP, its writes in the server
	// and what the 2xx waits for (the single node's group sync) are there,
	// and the account says what pprof sampled of the /proc figure.
	if a := r.Account; a == nil || a.Profiles != 1 || a.PerUnitUs[compHTTP] <= 0 || a.PerUnitUs[compSrvHooks]+a.PerUnitUs[compSrvClaims] <= 0 ||
		a.PerUnitUs[compWait] <= 0 || a.SampledUs <= 0 || a.SampledUs > 1.5*r.FleetCPUPerHookUs {
		t.Errorf("account %+v (by /proc %.0f µs per hook)", a, r.FleetCPUPerHookUs)
	}
	if !strings.Contains(out, "| "+compHTTP+" | ") {
		t.Errorf("no account table in:\n%s", out)
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report: %v", err)
	}
}

func TestParseHeapAlloc(t *testing.T) {
	const prof = "heap profile: 1: 2 [3: 4] @ heap/1048576\n1: 2 [3: 4] @ 0x1\n\n# runtime.MemStats\n# Alloc = 111\n# TotalAlloc = 999\n# HeapAlloc = 123456\n# HeapSys = 7\n"
	got, err := parseHeapAlloc(strings.NewReader(prof))
	if err != nil || got != 123456 {
		t.Fatalf("parseHeapAlloc = %d, %v; want 123456", got, err)
	}
	if _, err := parseHeapAlloc(strings.NewReader("# Alloc = 1\n")); err == nil {
		t.Fatal("no HeapAlloc: want an error")
	}
}

func TestCgroupMounts(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "mounts")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hybrid := "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n" +
		"cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\ncgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n"
	v1, v2, err := cgroupMounts(write(hybrid))
	if err != nil || v1 != "/sys/fs/cgroup/cpu" || v2 != "/sys/fs/cgroup/unified" {
		t.Fatalf("hybrid: %q %q %v", v1, v2, err)
	}
	v1, v2, err = cgroupMounts(write("cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate 0 0\n"))
	if err != nil || v1 != "" || v2 != "/sys/fs/cgroup" {
		t.Fatalf("v2 only: %q %q %v", v1, v2, err)
	}
	// cpu,cpuacct co-mounted is v1's cpu too.
	v1, _, _ = cgroupMounts(write("cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n"))
	if v1 != "/sys/fs/cgroup/cpu,cpuacct" {
		t.Fatalf("cpu,cpuacct: %q", v1)
	}
}
