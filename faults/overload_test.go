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
	took   time.Duration
}

// TestOverload drives one default node (the single binary, embedded
// server) with many HTTP clients at full speed, each hook with a dedupe
// key of its own and a 1 KiB body, sent once — then, on the idle node,
// sends every hook that was not answered 2xx again, as its sender would.
// Under overload the edge sheds before it works (503
// overloaded at once), the work it starts finishes inside its budget, and
// no sender's retry finds its key held (409) by a pending claim the
// overload left behind. Every answer is well formed (Retry-After on each
// 503) and every invariant holds (CheckHooks).
func TestOverload(t *testing.T) {
	t.Parallel()
	// The short version lowers the in-flight bound so that 300 clients
	// cross it: both the shedding and the work admitted under pressure
	// are exercised.
	dur, clients, args := 3*time.Second, 300, []string{"--max-inflight-hooks", "128"}
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
	body := bytes.Repeat([]byte("x"), 1024)
	copy(body, `{"event":"overload","pad":"`)
	body[len(body)-2], body[len(body)-1] = '"', '}'
	post := func(ctx context.Context, k HookKey) (a overloadAnswer) {
		a.key = k
		start := time.Now()
		defer func() { a.took = time.Since(start) }()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, node.URL()+"/v1/hooks/"+k.Tenant+"/"+k.Source, bytes.NewReader(body))
		if err != nil {
			t.Error(err)
			return a
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", k.Key)
		res, err := hc.Do(req)
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
		answers []overloadAnswer
		peakRSS atomic.Uint64 // KB
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
	started := time.Now()
	var clientsWG sync.WaitGroup
	for c := range clients {
		clientsWG.Go(func() {
			var mine []overloadAnswer
			for i := 0; ctx.Err() == nil; i++ {
				k := HookKey{"t" + strconv.Itoa(c%10), "s", "o-" + strconv.Itoa(c) + "-" + strconv.Itoa(i)}
				// Each request runs to its answer (the client's own
				// timeout), not to the end of the phase: a cut-off
				// request would leave its hook's fate unknown.
				mine = append(mine, post(context.Background(), k))
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
	var lat []time.Duration
	var retry []HookKey
	for _, a := range answers {
		name := strconv.Itoa(a.code)
		if a.reason != "" {
			name += " " + a.reason
		}
		codes[name]++
		if a.code != 0 {
			lat = append(lat, a.took)
		}
		if a.code != 202 && a.code != 200 {
			retry = append(retry, a.key)
		}
	}
	slices.Sort(lat)
	pct := func(p int) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, len(lat)*p/100)].Round(time.Millisecond)
	}
	t.Logf("overload: %d clients for %v: %d requests (%.0f/s), p50 %v, p99 %v, node peak RSS %.0f MB; answers %s",
		clients, dur, len(answers), float64(len(answers))/elapsed.Seconds(), pct(50), pct(99), float64(peakRSS.Load())/1024, fmtCodes(codes))

	// Phase 2: every sender whose hook was not accepted retries once, on
	// the idle node. A key the overload left held would answer 409.
	var retried sync.Map
	var next atomic.Int64
	var retryWG sync.WaitGroup
	for range min(32, len(retry)) {
		retryWG.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(retry); i = int(next.Add(1)) - 1 {
				retried.Store(retry[i], post(context.Background(), retry[i]))
			}
		})
	}
	retryWG.Wait()
	again := map[string]int{}
	retried.Range(func(_, v any) bool {
		a := v.(overloadAnswer)
		name := strconv.Itoa(a.code)
		if a.reason != "" {
			name += " " + a.reason
		}
		again[name]++
		if a.code != 202 && a.code != 200 {
			t.Errorf("retry of %s after the overload: %s (want 202, or 200 if the first attempt was stored)", a.key, name)
		}
		return true
	})
	t.Logf("retries after the overload: %d hooks: %s", len(retry), fmtCodes(again))
	if len(answers) == 0 || codes["202"] == 0 {
		t.Fatalf("the overload accepted nothing: %s", fmtCodes(codes))
	}
	if *overloadFor == 0 && codes["503 overloaded"] == 0 {
		t.Errorf("%d clients never crossed an in-flight bound of 128: nothing was shed (%s)", clients, fmtCodes(codes))
	}
	h.CheckHooks(t, l, false)
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
