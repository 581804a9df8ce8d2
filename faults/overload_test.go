package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// overloadFor and overloadClients size TestOverload: go test ./faults
// -timeout 10m -v -run Overload -faults.overload=15s runs the full
// version (1,000 clients for 15 s); without the flag CI runs a short one.
var (
	overloadFor     = flag.Duration("faults.overload", 0, "run TestOverload for this long at -faults.overload-clients (0: a short version)")
	overloadClients = flag.Int("faults.overload-clients", 1000, "HTTP clients of the full TestOverload")
)

// overloadAnswer is what one request of TestOverload was told.
type overloadAnswer struct {
	key    HookKey
	code   int    // 0: no answer
	reason string // the error of a 4xx/5xx body
	id     string // the hook id of a 2xx
	at     time.Duration
	took   time.Duration
	// probe: sent with Expect: 100-continue; bodySent: the client sent
	// its body (only after the node's 100 Continue, i.e. once the node
	// began to read it).
	probe, bodySent bool
}

func (a overloadAnswer) name() string {
	if a.reason != "" {
		return strconv.Itoa(a.code) + " " + a.reason
	}
	return strconv.Itoa(a.code)
}

// shed is a 503 overloaded: the answer the in-flight bound gives.
func (a overloadAnswer) shed() bool { return a.code == 503 && a.reason == "overloaded" }

// Bounds of TestOverload, from measurement (the short version under
// -race, 3 runs with other helpers' tests on the 2 cores, load 4–5; the
// node is built without -race, the 300 clients run in the race-built test
// process and are the bottleneck: 1.5k–5k requests/s):
//   - overloadShortInflight: the short version's in-flight bound. At 128
//     the clients crossed it in bursts only (9% shed, one slice of six
//     without a shed); at 32 they stay above it for the whole run.
//   - overloadShedP99: 99% of the shed answers arrive within it. Measured
//     p99 113–387 ms, max 482 ms — as slow as the admitted hooks (p99
//     116–432 ms): what a client sees here is its own queueing in the
//     saturated test process, not the node's work. That the node sheds
//     before it reads the body is shown by the probes instead (below).
//   - overloadShedShare: the share of first answers that must be shed in
//     the short version (measured 0.10–0.29: fewer when the machine slows
//     the clients down).
//   - overloadShedSlices, overloadSlicedMin: the run is cut into that
//     many slices and each must have at least overloadSlicedMin shed
//     answers (measured 51–850 per slice): the load stays above the bound,
//     not one 503 at a burst's edge.
const (
	overloadShortInflight = 32
	overloadShedP99       = time.Second
	overloadShedShare     = 0.05
	overloadShedSlices    = 6
	overloadSlicedMin     = 10
)

// TestOverload drives one default node (the single binary, embedded
// server) with many HTTP clients at full speed, each hook with a dedupe
// key of its own and a 1 KiB body, sent once — then, on the idle node,
// sends every hook that was not answered 2xx again, as its sender would.
// Under overload the edge sheds before it works (503
// overloaded at once), the work it starts finishes inside its budget, and
// no sender's retry finds its key held (409) by a pending claim the
// overload left behind. It is strict in the short version CI runs and
// the full one alike:
//   - every key's first answer is recorded, and is 202 or 503 overloaded:
//     no claim timed out (503 store_unavailable), no connection failed;
//   - shedding is real: a share of overloadShedShare of the first answers
//     (short version) and overloadSlicedMin sheds in each of
//     overloadShedSlices slices of the run;
//   - 99% of the shed answers within overloadShedP99;
//   - a shed key was not stored: its retry is answered 202 (a 200 would
//     name a hook the shed attempt stored), and HOOKS holds exactly one
//     hook for it, the one the retry named;
//   - shed before the body is read: every 25th client sends with Expect:
//     100-continue, so its body leaves the client only once the node
//     starts reading it; every shed answer to those came with the body
//     unsent, and some did;
//   - every answer is well formed (Retry-After on each 503) and every
//     invariant holds (CheckStored).
func TestOverload(t *testing.T) {
	t.Parallel()
	// The short version lowers the in-flight bound so that 300 clients
	// cross it: both the shedding and the work admitted under pressure
	// are exercised.
	dur, clients, args := 3*time.Second, 300, []string{"--max-inflight-hooks", strconv.Itoa(overloadShortInflight)}
	if *overloadFor > 0 {
		dur, clients, args = *overloadFor, *overloadClients, nil
	}
	h := Start(t, Options{Servers: 1, Embedded: true, Exclusive: true, Args: args})
	l := NewLedger()
	node := h.Node(0)
	// A client pool as wide as the load, so that connections are reused
	// (vegeta's behaviour) rather than opened per request.
	hc := &http.Client{
		Transport: &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients, IdleConnTimeout: 30 * time.Second},
		Timeout:   30 * time.Second,
	}
	defer hc.CloseIdleConnections()
	// The probes' client waits up to 10 s for the node's 100 Continue
	// before it sends a body: far beyond any admitted hook's latency.
	probe := &http.Client{
		Transport: &http.Transport{MaxIdleConns: clients, MaxIdleConnsPerHost: clients, IdleConnTimeout: 30 * time.Second, ExpectContinueTimeout: 10 * time.Second},
		Timeout:   30 * time.Second,
	}
	defer probe.CloseIdleConnections()
	body := bytes.Repeat([]byte("x"), 1024)
	copy(body, `{"event":"overload","pad":"`)
	body[len(body)-2], body[len(body)-1] = '"', '}'
	started := time.Now()
	post := func(ctx context.Context, k HookKey, expect bool) (a overloadAnswer) {
		a.key, a.probe = k, expect
		start := time.Now()
		a.at = start.Sub(started)
		defer func() { a.took = time.Since(start) }()
		rd := &sentReader{r: bytes.NewReader(body)}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, node.URL()+"/v1/hooks/"+k.Tenant+"/"+k.Source, rd)
		if err != nil {
			t.Error(err)
			return a
		}
		req.ContentLength = int64(len(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", k.Key)
		c := hc
		if expect {
			req.Header.Set("Expect", "100-continue")
			c = probe
		}
		res, err := c.Do(req)
		a.bodySent = rd.read.Load()
		if err != nil {
			l.Hook(k, 0, "")
			return a
		}
		raw, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		if err != nil {
			l.Hook(k, 0, "")
			return a
		}
		a.code = res.StatusCode
		var b struct {
			Status    string `json:"status"`
			ID        string `json:"id"`
			Duplicate bool   `json:"duplicate"`
			Error     string `json:"error"`
		}
		jerr := json.Unmarshal(raw, &b)
		switch {
		case a.code == 202 || a.code == 200:
			if jerr != nil || b.ID == "" || res.Header.Get("X-Hook-Id") != b.ID || (a.code == 200) != b.Duplicate {
				l.Bad(k, a.code, fmt.Sprintf("%d with body %q", a.code, raw))
				return a
			}
			a.id = b.ID
			l.Hook(k, a.code, b.ID)
		case a.code >= 200 && a.code < 300:
			l.Bad(k, a.code, fmt.Sprintf("unexpected status %d with body %q", a.code, raw))
		default:
			a.reason = b.Error
			if jerr != nil || b.Error == "" {
				l.Bad(k, a.code, fmt.Sprintf("%d with body %q", a.code, raw))
				return a
			}
			if a.code == 409 || a.code == 429 || a.code == 503 {
				if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || n < 1 {
					l.Bad(k, a.code, fmt.Sprintf("%d %s with Retry-After %q", a.code, b.Error, res.Header.Get("Retry-After")))
					return a
				}
			}
			l.Hook(k, a.code, "")
		}
		return a
	}

	// Phase 1: the overload.
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		mu      sync.Mutex
		answers []overloadAnswer // the first (and only) answer of every key sent
		peakRSS atomic.Uint64    // KB
		wg      sync.WaitGroup
	)
	sampler := make(chan struct{})
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if kb := uint64(nodeRSS(node) * 1024); kb > peakRSS.Load() {
				peakRSS.Store(kb)
			}
			select {
			case <-sampler:
				return
			case <-tick.C:
			}
		}
	})
	started = time.Now()
	var clientsWG sync.WaitGroup
	for c := range clients {
		clientsWG.Go(func() {
			var mine []overloadAnswer
			for i := 0; ctx.Err() == nil; i++ {
				k := HookKey{"t" + strconv.Itoa(c%10), "s", "o-" + strconv.Itoa(c) + "-" + strconv.Itoa(i)}
				// Each request runs to its answer (the client's own
				// timeout), not to the end of the phase: a cut-off
				// request would leave its hook's fate unknown.
				mine = append(mine, post(context.Background(), k, c%25 == 0))
			}
			mu.Lock()
			answers = append(answers, mine...)
			mu.Unlock()
		})
	}
	clientsWG.Wait()
	elapsed := time.Since(started)
	close(sampler)
	wg.Wait()

	codes := map[string]int{}
	var lat, shedLat, accLat []time.Duration
	var retry []HookKey
	first := make(map[HookKey]overloadAnswer, len(answers))
	perSlice := make([]int, overloadShedSlices)
	probesShed, probesShedRead := 0, 0
	for _, a := range answers {
		first[a.key] = a
		codes[a.name()]++
		if a.code != 0 {
			lat = append(lat, a.took)
		}
		switch {
		case a.shed():
			shedLat = append(shedLat, a.took)
			perSlice[min(overloadShedSlices-1, int(a.at*overloadShedSlices/dur))]++
			if a.probe {
				probesShed++
				if a.bodySent {
					probesShedRead++
				}
			}
		case a.code == 202:
			accLat = append(accLat, a.took)
		}
		if a.code != 202 && a.code != 200 {
			retry = append(retry, a.key)
		}
	}
	t.Logf("overload: %d clients for %v: %d requests (%.0f/s), p50 %v, p99 %v, node peak RSS %.0f MB; answers %s",
		clients, dur, len(answers), float64(len(answers))/elapsed.Seconds(), pct(lat, 50), pct(lat, 99), float64(peakRSS.Load())/1024, fmtCodes(codes))
	t.Logf("shed answers: p50 %v, p99 %v, max %v (bound on p99 %v); accepted: p50 %v, p99 %v; shed per %v of the run: %v; probes (Expect: 100-continue) shed %d, %d of them after their body was sent",
		pct(shedLat, 50), pct(shedLat, 99), pct(shedLat, 100), overloadShedP99, pct(accLat, 50), pct(accLat, 99), (dur / overloadShedSlices).Round(time.Millisecond), perSlice, probesShed, probesShedRead)

	// Phase 2: every sender whose hook was not accepted retries once, on
	// the idle node. A key the overload left held would answer 409.
	var retried sync.Map
	var next atomic.Int64
	var retryWG sync.WaitGroup
	for range min(32, len(retry)) {
		retryWG.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(retry); i = int(next.Add(1)) - 1 {
				retried.Store(retry[i], post(context.Background(), retry[i], false))
			}
		})
	}
	retryWG.Wait()
	again := map[string]int{}
	retries := map[HookKey]overloadAnswer{}
	notAccepted := 0
	retried.Range(func(_, v any) bool {
		a := v.(overloadAnswer)
		retries[a.key] = a
		again[a.name()]++
		if a.code != 202 {
			if notAccepted++; notAccepted <= 5 {
				t.Errorf("retry of %s (first answered %s) after the overload: %s (want 202: the first attempt was not stored)", a.key, first[a.key].name(), a.name())
			}
		}
		return true
	})
	if notAccepted > 5 {
		t.Errorf("... %d retries in all not answered 202 (%s)", notAccepted, fmtCodes(again))
	}
	t.Logf("retries after the overload: %d hooks: %s", len(retry), fmtCodes(again))

	// The first answers: 202 or 503 overloaded, nothing else.
	for name, n := range codes {
		if name != "202" && name != "503 overloaded" {
			t.Errorf("%d first answers %s (want only 202 and 503 overloaded)", n, name)
		}
	}
	if len(answers) == 0 || codes["202"] == 0 {
		t.Fatalf("the overload accepted nothing: %s", fmtCodes(codes))
	}
	shed := codes["503 overloaded"]
	if share := float64(shed) / float64(len(answers)); share < overloadShedShare && *overloadFor == 0 {
		t.Errorf("%d clients against an in-flight bound of %d: %d of %d first answers shed (%.2f, want >= %.2f)", clients, overloadShortInflight, shed, len(answers), share, overloadShedShare)
	}
	if shed == 0 {
		t.Errorf("%d clients: nothing was shed (%s)", clients, fmtCodes(codes))
	}
	for i, n := range perSlice {
		if n < overloadSlicedMin {
			t.Errorf("%d shed answers in slice %d of %d of the run (%v), want >= %d: shedding did not last (%s)", n, i+1, overloadShedSlices, perSlice, overloadSlicedMin, fmtCodes(codes))
		}
	}
	if p := pct(shedLat, 99); p > overloadShedP99 {
		t.Errorf("shed answers: p99 %v, above %v: not shed at once", p, overloadShedP99)
	}
	if probesShed == 0 {
		t.Errorf("no probe (Expect: 100-continue) was shed: shedding before the body is read not exercised")
	}
	if probesShedRead > 0 {
		t.Errorf("%d of %d shed probes were shed after the node asked for their body (100 Continue): not shed before the body is read", probesShedRead, probesShed)
	}

	stored := h.Stored(t)
	perKey := map[HookKey][]string{}
	for _, s := range stored {
		perKey[s.HookKey] = append(perKey[s.HookKey], s.ID)
	}
	wrong := 0
	for k, a := range first {
		if !a.shed() {
			continue
		}
		r := retries[k]
		if ids := perKey[k]; len(ids) != 1 || ids[0] != r.id {
			if wrong++; wrong <= 5 {
				t.Errorf("key %s shed, then its retry answered %s %s: HOOKS holds %v for it (want only the retry's hook)", k, r.name(), r.id, ids)
			}
		}
	}
	if wrong > 5 {
		t.Errorf("... %d shed keys in all with other hooks in HOOKS than their retry's", wrong)
	}
	h.CheckStored(t, l, stored, false)
}

// sentReader is a request body that records whether the client began to
// send it.
type sentReader struct {
	r    io.Reader
	read atomic.Bool
}

func (s *sentReader) Read(p []byte) (int, error) {
	s.read.Store(true)
	return s.r.Read(p)
}

// pct is the p-th percentile of ds (sorted in place), rounded to the
// millisecond; 0 for none.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*p/100)].Round(time.Millisecond)
}

// fmtCodes prints a count per answer, most frequent first.
func fmtCodes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var sb strings.Builder
	for i, k := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s: %d", k, m[k])
	}
	return sb.String()
}
