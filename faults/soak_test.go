package faults

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// soakFor is the length of TestSoak (go test ./faults -timeout 30m -v
// -run Soak -faults.soak=10m); 0 runs the short version CI runs.
var soakFor = flag.Duration("faults.soak", 0, "run TestSoak for this long, killing a node or a server every minute (0: a short version)")

// soakRow is what TestSoak reports for one interval.
type soakRow struct {
	end       time.Duration
	accepted  int64
	p50, p99  time.Duration
	rssMB     []float64
	goroutine []int
	other     float64 // cores other processes kept busy in the interval (otherCores)
	event     string
}

// soakBusy is the load of other processes (in cores) above which an
// interval's p99 is not judged: on a shared 2-core machine another
// agent's build bends the latency of a 10 s window by itself.
const soakBusy = 0.25

// soakSteady is the node TestSoak never kills (nor its server): its
// process lives through the whole soak, so its RSS and goroutines at the
// end can be compared with its own warm-up sample and a slow leak shows.
const soakSteady = 0

// How much the steady node may grow from its warm-up sample to the last
// report, in the short version CI runs and the long one alike. Measured
// (short version, 3 runs under -race with other helpers' builds and tests
// on the 2 cores, about 12,000 hooks accepted in between, a third of them
// by the steady node): RSS +1.4..+1.9 MB from 26.5 MB, goroutines −2..+2
// from 72–79. A node that kept 4 KiB per hook (a pooled buffer never
// returned) and left a goroutine per 100 hooks grew by 33.6 MB and 54
// goroutines: both fail. A leak of under about 1 KiB per hook stays within
// the RSS bound in the short version; the long one (10× the hooks per
// minute of soak) shows it.
const (
	soakRSSGrowthMB      = 8.0
	soakGoroutinesGrowth = 15
)

// TestSoak keeps a steady hook load on three nodes (process nodes on
// process servers) for -faults.soak, killing (kill -9) and restarting a
// node, then a server, in turn every minute (the short version CI runs:
// one node and one server, 5 s apart). Node soakSteady and its server are
// never killed. Every interval it reports the hooks accepted, p50 and p99
// latency, and each node's RSS and goroutines; after each restart the same
// for the 10 s that follow its first 10 s (5 s in the short version). At
// the end every invariant is checked (CheckHooks: nothing acked is lost,
// one winner per key, well-formed answers), and the steady node's RSS and
// goroutines at the last report are within soakRSSGrowthMB and
// soakGoroutinesGrowth of its warm-up sample (the first report; before the
// second kill in runs of 5 minutes or more). Runs of 5 minutes or more
// also assert that the p99 of the 10 s after each restart's first 10 s is
// within 2× (+50 ms) of the interval before the kill — judged only where
// other processes kept less than soakBusy cores busy in both intervals,
// and on at least half the restarts.
func TestSoak(t *testing.T) {
	t.Parallel()
	dur, every, settle := *soakFor, time.Minute, 10*time.Second
	long := dur >= 5*time.Minute
	kills := max(1, int(dur/every))
	if dur == 0 {
		every, settle, kills = 5*time.Second, 5*time.Second, 2
	}
	h := Start(t, Options{ServerProcs: true, NodeProcs: true})
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: []string{"a", "b", "c", "d", "e", "f"}, Workers: 6, Pace: 10 * time.Millisecond})
	defer run.stop()
	start := time.Now()
	var rows []soakRow
	lastAccepted := int64(0)
	lastCPU := sampleCPU()
	report := func(event string) soakRow {
		lat := run.takeLatencies()
		acc := run.accepted.Load()
		now := sampleCPU()
		r := soakRow{end: time.Since(start).Round(time.Second), accepted: acc - lastAccepted, other: otherCores(lastCPU, now), event: event}
		lastAccepted, lastCPU = acc, now
		if len(lat) > 0 {
			r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
		}
		for _, n := range h.Nodes() {
			r.rssMB = append(r.rssMB, nodeRSS(n))
			r.goroutine = append(r.goroutine, h.nodeGoroutines(n))
		}
		t.Logf("soak +%v: %d accepted, p50 %v, p99 %v, RSS MB %v, goroutines %v, other processes %.2f cores %s",
			r.end, r.accepted, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.rssMB, r.goroutine, r.other, event)
		return r
	}
	var slow, busy []string
	judged := 0
	for i := range kills {
		// The soak's schedule: steady load for an interval, then a fault
		// (a fixed clock by design, not a wait for a condition).
		time.Sleep(every)
		before := report("")
		// Nodes and servers other than soakSteady's, in turn.
		victim := 1 + (i/2)%2
		if i%2 == 0 {
			h.Node(victim).Kill()
			h.WaitServed(t, 30*time.Second, h.AllPartitions()...)
			h.Node(victim).Restart(t)
		} else {
			h.KillServer(victim)
			h.RestartServer(t, victim)
			h.waitCurrent(t, 60*time.Second)
		}
		// The goal: p99 back to its pre-kill level within 10 s of the
		// restart. So the restart and those 10 s are left out, and the
		// next 10 s measured.
		time.Sleep(settle)
		run.takeLatencies()
		lastCPU = sampleCPU()
		time.Sleep(settle)
		after := report(fmt.Sprintf("(%v–%v after restarting %s %d)", settle, 2*settle, map[bool]string{true: "node", false: "server"}[i%2 == 0], victim))
		rows = append(rows, before, after)
		switch {
		case after.other > soakBusy || before.other > soakBusy:
			busy = append(busy, fmt.Sprintf("+%v (other processes %.2f / %.2f cores)", after.end, before.other, after.other))
		case after.p99 > 2*before.p99+50*time.Millisecond:
			judged++
			slow = append(slow, fmt.Sprintf("+%v: p99 %v 10 s after a restart, %v before the kill", after.end, after.p99, before.p99))
		default:
			judged++
		}
	}
	run.stop()
	t.Logf("load: %s", run)
	r := h.CheckHooks(t, l, false)
	if r.Accepted == 0 {
		t.Fatal("no hook accepted")
	}
	warm, last := rows[0], rows[len(rows)-1]
	if long {
		warm = rows[2] // before the second kill
	}
	rss0, rss1 := warm.rssMB[soakSteady], last.rssMB[soakSteady]
	g0, g1 := warm.goroutine[soakSteady], last.goroutine[soakSteady]
	t.Logf("steady node %d: RSS %.1f MB at +%v (warm-up), %.1f MB at +%v (%+.1f MB, bound %+.1f); goroutines %d, then %d (%+d, bound %+d); %d hooks accepted in between",
		soakSteady, rss0, warm.end, rss1, last.end, rss1-rss0, soakRSSGrowthMB, g0, g1, g1-g0, soakGoroutinesGrowth, lastAccepted-acceptedBy(rows, warm))
	if rss0 <= 0 || rss1 <= 0 || g0 < 0 || g1 < 0 {
		t.Errorf("steady node %d: RSS or goroutines unreadable (RSS %.1f, %.1f MB; goroutines %d, %d)", soakSteady, rss0, rss1, g0, g1)
	}
	if rss1-rss0 > soakRSSGrowthMB {
		t.Errorf("steady node %d: RSS grew from %.1f MB after warm-up to %.1f MB (bound +%.1f MB)", soakSteady, rss0, rss1, soakRSSGrowthMB)
	}
	if g1-g0 > soakGoroutinesGrowth {
		t.Errorf("steady node %d: goroutines grew from %d after warm-up to %d (bound +%d)", soakSteady, g0, g1, soakGoroutinesGrowth)
	}
	if !long {
		return
	}
	for _, s := range slow {
		t.Errorf("latency not back: %s", s)
	}
	if len(busy) > 0 {
		t.Logf("p99 not judged after %d restarts: the machine was busy with other work (> %.2f cores): %v", len(busy), soakBusy, busy)
	}
	if judged < (kills+1)/2 {
		t.Errorf("p99 recovery judged after only %d of %d restarts: run the soak on a quieter machine", judged, kills)
	}
}

// acceptedBy sums the hooks accepted in rows up to and including upTo.
func acceptedBy(rows []soakRow, upTo soakRow) int64 {
	var n int64
	for _, r := range rows {
		n += r.accepted
		if r.end == upTo.end {
			break
		}
	}
	return n
}

// nodeRSS is the resident set of the node's current process in MB (0 when
// it cannot be read).
func nodeRSS(n *Node) float64 {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil || !p.running() {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// nodeGoroutines reads go_goroutines from the node's /metrics (-1 when it
// cannot).
func (h *Harness) nodeGoroutines(n *Node) int {
	res, err := h.http.Get(n.URL() + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}
