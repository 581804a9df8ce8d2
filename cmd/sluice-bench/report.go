package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one measured system in one row of the matrix.
type row struct {
	Run      int    `json:"run"`
	Workload string `json:"workload"`
	Inflight int    `json:"inflight"`
	System   string `json:"system"` // sluice | redis | edge | floor
	Skipped  string `json:"skipped,omitempty"`

	Ops       uint64  `json:"ops,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	OpsPerSec float64 `json:"ops_per_sec,omitempty"`
	P50Us     float64 `json:"p50_us,omitempty"`
	P99Us     float64 `json:"p99_us,omitempty"`
	P999Us    float64 `json:"p999_us,omitempty"`
	MaxUs     float64 `json:"max_us,omitempty"`
	// CPU seconds per 1,000 ops of the server process (the edge, the floor
	// server, redis-server) and of the load generator (this process).
	ServerCPUPer1k float64           `json:"server_cpu_s_per_1k,omitempty"`
	ClientCPUPer1k float64           `json:"client_cpu_s_per_1k,omitempty"`
	Outcomes       map[string]uint64 `json:"outcomes,omitempty"`
	FirstError     string            `json:"first_error,omitempty"`
}

func newRow(run int, workload string, inflight int, system string, res loadResult, srvCPU, cliCPU time.Duration) row {
	r := row{
		Run: run, Workload: workload, Inflight: inflight, System: system,
		Ops: res.Ops, Seconds: res.Elapsed.Seconds(),
		P50Us: us(res.Hist.quantile(0.50)), P99Us: us(res.Hist.quantile(0.99)),
		P999Us: us(res.Hist.quantile(0.999)), MaxUs: us(time.Duration(res.Hist.max)),
		Outcomes: map[string]uint64{}, FirstError: res.FirstErr,
	}
	if res.Elapsed > 0 {
		r.OpsPerSec = float64(res.Ops) / res.Elapsed.Seconds()
	}
	if res.Ops > 0 {
		r.ServerCPUPer1k = srvCPU.Seconds() * 1000 / float64(res.Ops)
		r.ClientCPUPer1k = cliCPU.Seconds() * 1000 / float64(res.Ops)
	}
	for o, n := range res.Outcomes {
		if n > 0 {
			r.Outcomes[outcomeNames[o]] = n
		}
	}
	return r
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// okShare is the fraction of ops that were admitted (ok).
func (r row) okShare() float64 {
	if r.Ops == 0 {
		return 0
	}
	return float64(r.Outcomes["ok"]) / float64(r.Ops)
}

// ratios are sluice / Redis (or edge / floor) for one row: above 1 is
// better for throughput, below 1 is better for latency and CPU.
type ratios struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50"`
	P99       float64 `json:"p99"`
	P999      float64 `json:"p999"`
	ServerCPU float64 `json:"server_cpu_per_op"`
}

func ratioOf(a, b row) *ratios {
	if a.Skipped != "" || b.Skipped != "" || a.Ops == 0 || b.Ops == 0 {
		return nil
	}
	return &ratios{
		OpsPerSec: div(a.OpsPerSec, b.OpsPerSec),
		P50:       div(a.P50Us, b.P50Us),
		P99:       div(a.P99Us, b.P99Us),
		P999:      div(a.P999Us, b.P999Us),
		ServerCPU: div(a.ServerCPUPer1k, b.ServerCPUPer1k),
	}
}

// div is a/b, 0 when b is 0 (JSON has no NaN).
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// pair is one row of the matrix: two systems side by side.
type pair struct {
	Run      int     `json:"run"`
	Workload string  `json:"workload"`
	Inflight int     `json:"inflight"`
	A        row     `json:"a"` // sluice or edge
	B        row     `json:"b"` // redis or floor
	Ratio    *ratios `json:"ratio,omitempty"`
}

func newPair(a, b row) pair {
	return pair{Run: a.Run, Workload: a.Workload, Inflight: a.Inflight, A: a, B: b, Ratio: ratioOf(a, b)}
}

// runResult is one full pass over the matrix.
type runResult struct {
	Run     int    `json:"run"`
	LoadAvg string `json:"loadavg_at_start"`
	Pairs   []pair `json:"pairs"`
	// Drains: what expiring the never-settled pending claims of the
	// hit+claim rows cost, measured after them (with --drain).
	Drains []*drainResult `json:"drains,omitempty"`
}

// printRun writes one run's table.
func printRun(w io.Writer, r runResult) {
	fmt.Fprintf(w, "\n== run %d (load average at start: %s) ==\n", r.Run, r.LoadAvg)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tin flight\tsystem\tops/s\tp50\tp99\tp99.9\tsrv CPU s/1k\tcli CPU s/1k\tok %\t")
	for i, p := range r.Pairs {
		xs := []row{p.A, p.B}
		if i+1 < len(r.Pairs) && sameRow(r.Pairs[i+1].B, p.B) {
			xs = xs[:1] // B is printed with the last pair that shares it
		}
		for _, x := range xs {
			if x.Skipped != "" {
				fmt.Fprintf(tw, "%s\t%d\t%s\tskipped: %s\t\t\t\t\t\t\t\n", x.Workload, x.Inflight, x.System, firstLine(x.Skipped))
				continue
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.1f\t\n", x.Workload, x.Inflight, x.System,
				thousands(x.OpsPerSec), fmtUs(x.P50Us), fmtUs(x.P99Us), fmtUs(x.P999Us),
				x.ServerCPUPer1k, x.ClientCPUPer1k, 100*x.okShare())
		}
		if q := p.Ratio; q != nil {
			fmt.Fprintf(tw, "%s\t%d\t%s/%s\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\t\t\n", p.Workload, p.Inflight, p.A.System, p.B.System,
				q.OpsPerSec, q.P50, q.P99, q.P999, q.ServerCPU)
		}
	}
	tw.Flush()
	printDrains(w, r.Drains)
	for i, p := range r.Pairs {
		xs := []row{p.A, p.B}
		if i+1 < len(r.Pairs) && sameRow(r.Pairs[i+1].B, p.B) {
			xs = xs[:1]
		}
		for _, x := range xs {
			if x.FirstError != "" {
				fmt.Fprintf(w, "  %s %s/%d: %d errors, first: %s\n", x.System, x.Workload, x.Inflight, x.Outcomes["error"], x.FirstError)
			}
		}
	}
}

func sameRow(a, b row) bool {
	return a.Run == b.Run && a.Workload == b.Workload && a.Inflight == b.Inflight && a.System == b.System
}

// spread is min / median / max of one figure over runs.
type spread struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

func spreadOf(xs []float64) spread {
	xs = slices.DeleteFunc(slices.Clone(xs), func(x float64) bool { return math.IsNaN(x) })
	if len(xs) == 0 {
		return spread{}
	}
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return spread{Min: xs[0], Median: m, Max: xs[len(xs)-1], N: len(xs)}
}

func (s spread) String() string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return trimFloat(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", trimFloat(s.Median), trimFloat(s.Min), trimFloat(s.Max))
}

// summaryRow aggregates one (workload, in flight) row over all runs.
type summaryRow struct {
	Workload  string `json:"workload"`
	Inflight  int    `json:"inflight"`
	A         string `json:"a"`
	B         string `json:"b"`
	AOpsPerS  spread `json:"a_ops_per_sec"`
	BOpsPerS  spread `json:"b_ops_per_sec"`
	RatioOps  spread `json:"ratio_ops_per_sec"`
	AP99Us    spread `json:"a_p99_us"`
	BP99Us    spread `json:"b_p99_us"`
	RatioP99  spread `json:"ratio_p99"`
	RatioCPU  spread `json:"ratio_server_cpu_per_op"`
	ACPUPer1k spread `json:"a_server_cpu_s_per_1k"`
	BCPUPer1k spread `json:"b_server_cpu_s_per_1k"`
}

func summarize(runs []runResult) []summaryRow {
	type key struct {
		w, a string
		n    int
	}
	var order []key
	groups := map[key][]pair{}
	for _, r := range runs {
		for _, p := range r.Pairs {
			k := key{p.Workload, p.A.System, p.Inflight}
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], p)
		}
	}
	var out []summaryRow
	for _, k := range order {
		ps := groups[k]
		col := func(f func(p pair) (float64, bool)) spread {
			var xs []float64
			for _, p := range ps {
				if v, ok := f(p); ok {
					xs = append(xs, v)
				}
			}
			return spreadOf(xs)
		}
		okA := func(p pair) bool { return p.A.Skipped == "" && p.A.Ops > 0 }
		okB := func(p pair) bool { return p.B.Skipped == "" && p.B.Ops > 0 }
		out = append(out, summaryRow{
			Workload: k.w, Inflight: k.n, A: ps[0].A.System, B: ps[0].B.System,
			AOpsPerS:  col(func(p pair) (float64, bool) { return p.A.OpsPerSec, okA(p) }),
			BOpsPerS:  col(func(p pair) (float64, bool) { return p.B.OpsPerSec, okB(p) }),
			RatioOps:  col(func(p pair) (float64, bool) { return ratioField(p, func(r *ratios) float64 { return r.OpsPerSec }) }),
			AP99Us:    col(func(p pair) (float64, bool) { return p.A.P99Us, okA(p) }),
			BP99Us:    col(func(p pair) (float64, bool) { return p.B.P99Us, okB(p) }),
			RatioP99:  col(func(p pair) (float64, bool) { return ratioField(p, func(r *ratios) float64 { return r.P99 }) }),
			RatioCPU:  col(func(p pair) (float64, bool) { return ratioField(p, func(r *ratios) float64 { return r.ServerCPU }) }),
			ACPUPer1k: col(func(p pair) (float64, bool) { return p.A.ServerCPUPer1k, okA(p) }),
			BCPUPer1k: col(func(p pair) (float64, bool) { return p.B.ServerCPUPer1k, okB(p) }),
		})
	}
	return out
}

func ratioField(p pair, f func(*ratios) float64) (float64, bool) {
	if p.Ratio == nil {
		return 0, false
	}
	return f(p.Ratio), true
}

func printSummary(w io.Writer, rows []summaryRow, runs int) {
	fmt.Fprintf(w, "\n== summary over %d run(s): median (min–max) ==\n", runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "workload\tin flight\tA ops/s\tB ops/s\tA/B ops/s\tA p99 µs\tB p99 µs\tA/B p99\tA/B CPU/op\t")
	for _, s := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Workload+" ("+s.A+" vs "+s.B+")", s.Inflight,
			s.AOpsPerS, s.BOpsPerS, s.RatioOps, s.AP99Us, s.BP99Us, s.RatioP99, s.RatioCPU)
	}
	tw.Flush()
}

// goal is one of the bench's targets, checked against the summary
// medians; its name starts with the tag of the issue that set it
// (docs/BENCHMARKS.md lists them).
type goal struct {
	Name   string  `json:"name"`
	Target string  `json:"target"`
	Value  float64 `json:"value"`
	Met    bool    `json:"met"`
	Known  bool    `json:"known"`
}

func checkGoals(rows []summaryRow, mem *memoryResult, maxInflight int) []goal {
	findA := func(w, a string) *summaryRow {
		for i := range rows {
			if rows[i].Workload == w && rows[i].Inflight == maxInflight && rows[i].A == a {
				return &rows[i]
			}
		}
		return nil
	}
	find := func(w string) *summaryRow { return findA(w, "sluice") }
	var gs []goal
	add := func(name, target string, v float64, known, met bool) {
		gs = append(gs, goal{Name: name, Target: target, Value: v, Known: known, Met: known && met})
	}
	at := fmt.Sprintf("@%d", maxInflight)
	if s := find("decisions"); s != nil {
		add("decisions/s sluice/redis "+at, ">= 2.00", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 2)
		add("decisions p99 sluice/redis "+at, "<= 1.00", s.RatioP99.Median, s.RatioP99.N > 0, s.RatioP99.Median <= 1)
	}
	if s := find("hit+claim"); s != nil {
		add("hit+claim/s sluice/redis "+at, ">= 1.50", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 1.5)
		add("hit+claim p99 sluice/redis "+at, "<= 1.00", s.RatioP99.Median, s.RatioP99.N > 0, s.RatioP99.Median <= 1)
	}
	if s := find("hot"); s != nil {
		add("hot p99 sluice/redis "+at, "<= 1.00", s.RatioP99.Median, s.RatioP99.N > 0, s.RatioP99.Median <= 1)
	}
	// The claims fast path.
	if s := find("hit+claim"); s != nil {
		add("#10 hit+claim/s sluice/redis "+at, ">= 1.00", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 1)
		add("#10 hit+claim server CPU/op sluice/redis "+at, "<= 1.50", s.RatioCPU.Median, s.RatioCPU.N > 0, s.RatioCPU.Median <= 1.5)
	}
	if s := find("decisions"); s != nil {
		add("#10 decisions/s sluice/redis "+at, ">= 3.00", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 3)
	}
	if s := find("hot"); s != nil {
		add("#10 hot/s sluice/redis "+at, ">= 3.00", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 3)
	}
	for i := range rows {
		if s := &rows[i]; s.Workload == "edge" {
			add(fmt.Sprintf("#10 edge hooks/s edge/floor @%d", s.Inflight), ">= 0.55", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 0.55)
			add(fmt.Sprintf("#10 edge server CPU/hook edge/floor @%d", s.Inflight), "<= 2.00", s.RatioCPU.Median, s.RatioCPU.N > 0, s.RatioCPU.Median <= 2)
		}
	}
	// Durable by default: the claim cycle against Redis with appendfsync always.
	if s := find("cycle-durable"); s != nil {
		add("#21 durable claim cycles/s sluice/redis-aof "+at, ">= 1.00", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 1)
	}
	// The same cycle as a NATS client runs it: quota.hit, then claims.settle.
	if s := findA("cycle-durable", "sluice-client"); s != nil {
		add("#30 the client's durable claim cycles/s sluice-client/redis-aof "+at, ">= 0.85", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 0.85)
	}
	for i := range rows {
		if s := &rows[i]; s.Workload == "edge-barrier" {
			add(fmt.Sprintf("#21 edge hooks/s durable/acked @%d", s.Inflight), ">= 0.80", s.RatioOps.Median, s.RatioOps.N > 0, s.RatioOps.Median >= 0.8)
			added := (s.AP99Us.Median - s.BP99Us.Median) / 1000
			add(fmt.Sprintf("#21 edge p99 added by the barrier, ms @%d", s.Inflight), "<= 2.00", added, s.AP99Us.N > 0 && s.BP99Us.N > 0, added <= 2)
		}
	}
	if mem != nil {
		v, ok := mem.BucketBytes["hooks"]
		add("bytes per idle tenant bucket", "<= 64", v, ok, v <= 64)
	}
	return gs
}

func printGoals(w io.Writer, gs []goal) {
	if len(gs) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== goals (each tagged with the issue that set it) ==")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, g := range gs {
		status := "MISSED"
		switch {
		case !g.Known:
			status = "unknown"
		case g.Met:
			status = "met"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", g.Name, trimFloat(g.Value), g.Target, status)
	}
	tw.Flush()
}

func printMemory(w io.Writer, m *memoryResult) {
	if m == nil {
		return
	}
	fmt.Fprintln(w, "\n== memory ==")
	if m.BucketError != "" {
		fmt.Fprintln(w, "idle GCRA buckets: error:", firstLine(m.BucketError))
	}
	names := make([]string, 0, len(m.BucketBytes))
	for k := range m.BucketBytes {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(w, "sluice idle GCRA bucket (1M tenants, %s): %.1f bytes/bucket\n", k, m.BucketBytes[k])
	}
	if c := m.Claims; c != nil {
		fmt.Fprintf(w, "sluice claim in JetStream KV (%d claims, key %q): pending %.1f B/claim, committed %.1f B/claim (stream State.Bytes/Msgs, %d msgs); store dir %.1f B/claim; server heap %.1f B/claim right after writing, %.1f B/claim once idle (an old claim)\n",
			c.Claims, c.KeyExample, c.PendingStreamBytesPer, c.CommittedStreamBytesPer, c.CommittedMsgs, c.StoreDirBytesPer, c.ServerHeapBytesPer, c.ServerIdleHeapBytesPer)
	}
	if m.ClaimsError != "" {
		fmt.Fprintln(w, "claims: error:", firstLine(m.ClaimsError))
	}
	if r := m.Redis; r != nil {
		fmt.Fprintf(w, "redis GCRA bucket key (%d keys like %q, PX): %.1f bytes/bucket (used_memory growth)\n", r.BucketKeys, r.BucketKeyExample, r.BytesPerBucket)
		fmt.Fprintf(w, "redis claim key (%d keys like %q, PX): %.1f bytes/claim\n", r.ClaimKeys, r.ClaimKeyExample, r.BytesPerClaim)
	}
	if m.RedisSkipped != "" {
		fmt.Fprintln(w, "redis memory: skipped:", firstLine(m.RedisSkipped))
	}
}

func fmtUs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 1000:
		return fmt.Sprintf("%.0fµs", v)
	case v < 10_000:
		return fmt.Sprintf("%.2fms", v/1000)
	case v < 1_000_000:
		return fmt.Sprintf("%.1fms", v/1000)
	}
	return fmt.Sprintf("%.2fs", v/1e6)
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func trimFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.Abs(v) >= 1000:
		return thousands(v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
