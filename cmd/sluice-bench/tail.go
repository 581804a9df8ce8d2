package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"
)

// The tail workload (--workloads tail): one default node, hooks sent at a
// steady --tail-rate (open loop: each hook is due at its slot whatever
// the previous ones did, and its latency counts from the slot, so a stall
// shows in every hook it delays rather than hiding in fewer sends), for
// --duration after --warmup. It reports p50/p99/p99.9/max for the whole
// window and for each of its --slices, the answers, and checks that the
// HOOKS stream holds at least every hook answered 202.

// tailWorkers bounds the hooks in flight: a node slower than the rate
// makes the slots wait for a worker, and that wait counts in the latency.
const tailWorkers = 512

type tailSlice struct {
	FromSec float64 `json:"from_s"`
	Sent    uint64  `json:"sent"`
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
	P999Us  float64 `json:"p999_us"`
	MaxUs   float64 `json:"max_us"`
}

type tailResult struct {
	Rate       int               `json:"rate_per_s"`
	Durability string            `json:"durability"`
	Seconds    float64           `json:"seconds"`
	Statuses   map[string]uint64 `json:"statuses"`
	All        tailSlice         `json:"all"`
	Slices     []tailSlice       `json:"slices"`
	Stored     uint64            `json:"hooks_stream_msgs"`
	// Stages: of the edge's own histograms (sluice_edge_<stage>_seconds)
	// in the window, how many observations took over 5 ms and over 50 ms;
	// with the group sync's rounds and the Go GC's cycles.
	Stages []tailStage `json:"stages"`
	Rounds string      `json:"barrier"`
	GCs    float64     `json:"gc_cycles"`
	GCMax  float64     `json:"gc_max_pause_us"`
	Error  string      `json:"error,omitempty"`
}

type tailStage struct {
	Stage  string  `json:"stage"`
	Count  float64 `json:"count"`
	Over5  float64 `json:"over_5ms"`
	Over50 float64 `json:"over_50ms"`
}

// metrics reads base's /metrics as name{labels} → value.
func metrics(ctx context.Context, base string) map[string]float64 {
	m := map[string]float64{}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return m
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return m
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return m
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if i := strings.LastIndexByte(sc.Text(), ' '); i > 0 && !strings.HasPrefix(sc.Text(), "#") {
			m[sc.Text()[:i]], _ = strconv.ParseFloat(sc.Text()[i+1:], 64)
		}
	}
	return m
}

// tailStages is what the edge's stage histograms saw between a and b.
func tailStages(a, b map[string]float64) []tailStage {
	var out []tailStage
	for _, st := range []string{"hit", "stream_publish", "sync_wait"} {
		h := "sluice_edge_" + st + "_seconds"
		n := b[h+"_count"] - a[h+"_count"]
		le := func(bound string) float64 { k := h + `_bucket{le="` + bound + `"}`; return b[k] - a[k] }
		out = append(out, tailStage{Stage: st, Count: n, Over5: n - le("0.005"), Over50: n - le("0.05")})
	}
	return out
}

func newTailSlice(from float64, h *hist) tailSlice {
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	return tailSlice{FromSec: from, Sent: h.total, P50Us: us(h.quantile(0.50)), P99Us: us(h.quantile(0.99)),
		P999Us: us(h.quantile(0.999)), MaxUs: float64(h.max) / 1e3}
}

func (b *bench) tail(ctx context.Context) (*tailResult, error) {
	o := b.o
	res := &tailResult{Rate: o.tailRate, Durability: "synced (default)", Statuses: map[string]uint64{}}
	var extra []string
	if o.tailDurability != "" {
		res.Durability, extra = o.tailDurability, []string{"--durability", o.tailDurability}
	}
	bin, err := b.edgeBinary(ctx)
	if err != nil {
		return res, err
	}
	dir := filepath.Join(b.tmp, "tail")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	e, err := startEdge(ctx, bin, dir, o.partitions, true, extra...)
	if err != nil {
		return res, err
	}
	defer e.stop(15 * time.Second)
	b.logf("tail: edge ready (pprof on %s); %d hooks/s for %s after %s", e.pprofAddr, o.tailRate, o.duration, o.warmup)

	client := httpClient(tailWorkers)
	names := tenantNames(o.httpTenants)
	prefix := keyPrefix()
	interval := time.Second / time.Duration(o.tailRate)
	sliceLen := o.duration / time.Duration(o.slices)
	type slot struct {
		seq uint64
		due time.Time
	}
	var (
		mu     sync.Mutex
		hists  = make([]hist, o.slices)
		status = map[int]uint64{}
		errs   firstError
	)
	start := time.Now().Add(o.warmup) // the measured window's first slot
	var before map[string]float64
	sampled := make(chan struct{})
	go func() { // the edge's histograms as the window opens
		defer close(sampled)
		time.Sleep(time.Until(start))
		before = metrics(ctx, e.httpURL)
	}()
	slots := make(chan slot, tailWorkers)
	var wg sync.WaitGroup
	for range tailWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range slots {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost,
					e.httpURL+"/v1/hooks/"+names[s.seq%uint64(len(names))]+"/bench", bytes.NewReader(hookBody))
				code := 0
				if err == nil {
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", prefix+strconv.FormatUint(s.seq, 36))
					var r *http.Response
					if r, err = client.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, r.Body)
						r.Body.Close()
						code = r.StatusCode
					}
				}
				lat := time.Since(s.due)
				if err != nil {
					errs.set(err)
				}
				if i := int(s.due.Sub(start) / sliceLen); !s.due.Before(start) && i < o.slices {
					mu.Lock()
					hists[i].record(lat)
					status[code]++
					mu.Unlock()
				}
			}
		}()
	}
	end := start.Add(o.duration)
	t0 := start.Add(-o.warmup)
	for i := uint64(0); ctx.Err() == nil; i++ {
		due := t0.Add(time.Duration(i) * interval)
		if !due.Before(end) {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		slots <- slot{seq: i, due: due}
	}
	close(slots)
	wg.Wait()
	<-sampled
	res.Seconds = o.duration.Seconds()
	after := metrics(ctx, e.httpURL)
	res.Stages = tailStages(before, after)
	res.GCs = after["go_gc_duration_seconds_count"] - before["go_gc_duration_seconds_count"]
	res.GCMax = after[`go_gc_duration_seconds{quantile="1"}`] * 1e6
	const h = "sluice_store_sync_round_seconds"
	if r := after[h+"_count"] - before[h+"_count"]; r > 0 {
		le := func(bound string) float64 { k := h + `_bucket{le="` + bound + `"}`; return after[k] - before[k] }
		res.Rounds = fmt.Sprintf("%.0f rounds, mean %.2f ms, %.0f over 5 ms, %.0f over 50 ms", r,
			(after[h+"_sum"]-before[h+"_sum"])*1000/r, r-le("0.005"), r-le("0.05"))
	}

	var all hist
	for i := range hists {
		all.merge(&hists[i])
		res.Slices = append(res.Slices, newTailSlice((time.Duration(i)*sliceLen).Seconds(), &hists[i]))
	}
	res.All = newTailSlice(0, &all)
	for code, n := range status {
		name := strconv.Itoa(code)
		if code == 0 {
			name = "error"
		}
		res.Statuses[name] = n
	}
	nc, err := nats.Connect(e.natsURL)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	if res.Stored, err = hooksStreamMsgs(ctx, nc, 1); err != nil {
		return res, err
	}
	if got, want := res.Stored, status[http.StatusAccepted]; got < want {
		res.Error = fmt.Sprintf("HOOKS holds %d messages, fewer than the %d hooks answered 202 in the window", got, want)
	} else if s := errs.String(); s != "" {
		res.Error = s
	}
	return res, nil
}

func printTail(w io.Writer, r *tailResult) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "\ntail: %d hooks/s paced (latency from each hook's slot), one node, %s, %.0f s\n", r.Rate, r.Durability, r.Seconds)
	fmt.Fprintf(w, "%-8s %8s %9s %9s %9s %9s\n", "from", "sent", "p50", "p99", "p99.9", "max")
	for _, s := range append(r.Slices, r.All) {
		from := fmt.Sprintf("%.0fs", s.FromSec)
		if s == r.All {
			from = "all"
		}
		fmt.Fprintf(w, "%-8s %8d %9s %9s %9s %9s\n", from, s.Sent, fmtUs(s.P50Us), fmtUs(s.P99Us), fmtUs(s.P999Us), fmtUs(s.MaxUs))
	}
	fmt.Fprintf(w, "answers %v; HOOKS holds %d\n", r.Statuses, r.Stored)
	for _, st := range r.Stages {
		fmt.Fprintf(w, "edge stage %-15s %8.0f observed, %6.0f over 5 ms, %5.0f over 50 ms\n", st.Stage, st.Count, st.Over5, st.Over50)
	}
	fmt.Fprintf(w, "barrier: %s; Go GC: %.0f cycles in the window, longest pause since start %.0f µs\n", r.Rounds, r.GCs, r.GCMax)
	if r.Error != "" {
		fmt.Fprintln(w, "error:", r.Error)
	}
}

// diskResult is the disk workload's: the latency of fdatasync after a
// 600-byte append, one at a time (2 ms apart), in the bench's temporary
// directory (where the nodes keep their data), with nothing else of the
// bench running — what the device alone gives the group sync's rounds.
type diskResult struct {
	Syncs  int     `json:"syncs"`
	P50Us  float64 `json:"p50_us"`
	P99Us  float64 `json:"p99_us"`
	P999Us float64 `json:"p999_us"`
	MaxUs  float64 `json:"max_us"`
	Over5  int     `json:"over_5ms"`
	Over50 int     `json:"over_50ms"`
}

func (b *bench) disk(ctx context.Context) (*diskResult, error) {
	f, err := os.CreateTemp(b.tmp, "disk-probe")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	var h hist
	r := &diskResult{}
	buf := make([]byte, 600)
	for end := time.Now().Add(b.o.duration); time.Now().Before(end) && ctx.Err() == nil; time.Sleep(2 * time.Millisecond) {
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := unix.Fdatasync(int(f.Fd())); err != nil && err != unix.EINTR {
			return nil, err
		}
		d := time.Since(t0)
		h.record(d)
		if d > 5*time.Millisecond {
			r.Over5++
		}
		if d > 50*time.Millisecond {
			r.Over50++
		}
	}
	s := newTailSlice(0, &h)
	r.Syncs, r.P50Us, r.P99Us, r.P999Us, r.MaxUs = int(h.total), s.P50Us, s.P99Us, s.P999Us, s.MaxUs
	return r, nil
}

func printDisk(w io.Writer, r *diskResult) {
	if r != nil {
		fmt.Fprintf(w, "\ndisk: %d fdatasyncs of a 600 B append, one at a time: p50 %s p99 %s p99.9 %s max %s; %d over 5 ms, %d over 50 ms\n",
			r.Syncs, fmtUs(r.P50Us), fmtUs(r.P99Us), fmtUs(r.P999Us), fmtUs(r.MaxUs), r.Over5, r.Over50)
	}
}
