package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// errNodeDown: the node has no HTTP listener (killed, stopped).
var errNodeDown = errors.New("node down")

// PostHook sends one hook to node i and returns the status and, for 202
// and 200, the hook id of the body (and checks that X-Hook-Id agrees). An
// answer that breaks the protocol (a 2xx other than 200 and 202, a body
// that is not the documented JSON, ids that disagree, a 409, 429 or 503
// without a Retry-After of whole seconds >= 1) returns its status and an
// error: record it with Ledger.Bad, never as "no answer".
func (h *Harness) PostHook(ctx context.Context, i int, k HookKey, body []byte) (int, string, error) {
	code, id, _, err := h.postHook(ctx, i, k, body)
	return code, id, err
}

// postHook is PostHook that also returns the answer's header.
func (h *Harness) postHook(ctx context.Context, i int, k HookKey, body []byte) (int, string, http.Header, error) {
	code, id, hdr, err := h.sendHook(ctx, i, k, body)
	if err == nil && (code == 409 || code == 429 || code == 503) {
		if n, aerr := strconv.Atoi(hdr.Get("Retry-After")); aerr != nil || n < 1 {
			err = fmt.Errorf("%d with Retry-After %q", code, hdr.Get("Retry-After"))
		}
	}
	return code, id, hdr, err
}

func (h *Harness) sendHook(ctx context.Context, i int, k HookKey, body []byte) (int, string, http.Header, error) {
	u := h.Node(i).URL()
	if u == "" {
		return 0, "", nil, errNodeDown
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u+"/v1/hooks/"+k.Tenant+"/"+k.Source, bytes.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if k.Key != "" {
		req.Header.Set("Idempotency-Key", k.Key)
	}
	res, err := h.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, "", nil, err
	}
	code, hdr := res.StatusCode, res.Header
	if code < 200 || code >= 300 {
		return code, "", hdr, nil
	}
	if code != 202 && code != 200 {
		return code, "", hdr, fmt.Errorf("unexpected status %d with body %q", code, raw)
	}
	var b struct {
		Status    string `json:"status"`
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := json.Unmarshal(raw, &b); err != nil || b.ID == "" {
		return code, "", hdr, fmt.Errorf("%d with body %q", code, raw)
	}
	if hid := hdr.Get("X-Hook-Id"); hid != b.ID {
		return code, "", hdr, fmt.Errorf("%d: X-Hook-Id %q, body id %q", code, hid, b.ID)
	}
	if (code == 202) != (b.Status == "accepted") || (code == 200) != b.Duplicate {
		return code, "", hdr, fmt.Errorf("%d with body %q", code, raw)
	}
	return code, b.ID, hdr, nil
}

// hookLoad sends hooks the way a webhook provider does: each hook has a
// dedupe key of its own; a 409, 429, 503 or a failed connection is retried
// with the same key after a short pause, at the next node.
type hookLoad struct {
	Tenants  []string      // round robin (default "t")
	Source   string        // default "s"
	Workers  int           // default 8
	Nodes    []int         // nodes to send to (default all)
	Pace     time.Duration // pause between two hooks of a worker
	Retry    time.Duration // pause before a retry (default 20 ms)
	MaxTries int           // attempts per hook (default 100)
	Prefix   string        // key prefix (default "k")
	// Redeliver sends every hook once more, to the next node, after its
	// 2xx (a provider's redelivery): it must be answered 200 with the same
	// id (or, on a degraded fleet, may split the key).
	Redeliver bool
}

// hookBody is the body of every hook a hookLoad sends.
var hookBody = []byte(`{"event":"fault-test","pad":"0123456789abcdef0123456789abcdef"}`)

// loadRun is a running hookLoad.
type loadRun struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	sent     atomic.Int64 // requests
	accepted atomic.Int64 // 2xx
	errs     atomic.Int64 // no answer
	gaveUp   atomic.Int64 // hooks abandoned after MaxTries
	bad      atomic.Int64 // malformed answers (Ledger.Bad)
	mu       sync.Mutex
	perTen   map[string]int  // 202s per tenant
	denied   map[string]int  // 429s per tenant
	lat      []time.Duration // latencies of answered requests since takeLatencies
}

// startHooks starts hl in the background, recording every answer in l.
func (h *Harness) startHooks(l *Ledger, hl hookLoad) *loadRun {
	if len(hl.Tenants) == 0 {
		hl.Tenants = []string{"t"}
	}
	if hl.Source == "" {
		hl.Source = "s"
	}
	if hl.Workers == 0 {
		hl.Workers = 8
	}
	if len(hl.Nodes) == 0 {
		for i := range h.nodes {
			hl.Nodes = append(hl.Nodes, i)
		}
	}
	if hl.Retry == 0 {
		hl.Retry = 20 * time.Millisecond
	}
	if hl.MaxTries == 0 {
		hl.MaxTries = 100
	}
	if hl.Prefix == "" {
		hl.Prefix = "k"
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &loadRun{cancel: cancel, perTen: map[string]int{}, denied: map[string]int{}}
	body := hookBody
	for w := range hl.Workers {
		r.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := HookKey{hl.Tenants[(w+i*hl.Workers)%len(hl.Tenants)], hl.Source, hl.Prefix + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)}
				for try := 0; try < hl.MaxTries && ctx.Err() == nil; try++ {
					node := hl.Nodes[(w+i+try)%len(hl.Nodes)]
					r.sent.Add(1)
					sentAt := time.Now()
					code, id, err := h.PostHook(ctx, node, k, body)
					if code != 0 {
						r.mu.Lock()
						if len(r.lat) < maxLatencies {
							r.lat = append(r.lat, time.Since(sentAt))
						}
						r.mu.Unlock()
					}
					if err != nil && code != 0 {
						r.bad.Add(1)
						l.Bad(k, code, err.Error())
						break // a protocol violation: recorded, not retried
					}
					if err != nil {
						r.errs.Add(1)
						code = 0
					}
					if ctx.Err() != nil && code == 0 {
						break // cut off by the end of the run: no answer
					}
					l.Hook(k, code, id)
					if code == 202 || code == 200 {
						r.accepted.Add(1)
						if code == 202 {
							r.mu.Lock()
							r.perTen[k.Tenant]++
							r.mu.Unlock()
						}
						if hl.Redeliver {
							next := hl.Nodes[(w+i+try+1)%len(hl.Nodes)]
							r.sent.Add(1)
							if code, id, err := h.PostHook(ctx, next, k, body); err == nil && code != 0 {
								l.Hook(k, code, id)
							} else if err != nil && code != 0 {
								r.bad.Add(1)
								l.Bad(k, code, err.Error())
							}
						}
						break
					}
					if code == 429 {
						r.mu.Lock()
						r.denied[k.Tenant]++
						r.mu.Unlock()
					}
					if code != 0 && code != 409 && code != 429 && code != 503 {
						break // a 4xx the sender would not retry
					}
					if try == hl.MaxTries-1 {
						r.gaveUp.Add(1)
					}
					sleepCtx(ctx, hl.Retry)
				}
				sleepCtx(ctx, hl.Pace)
			}
		})
	}
	return r
}

// stop ends the run and waits for its workers.
func (r *loadRun) stop() {
	r.cancel()
	r.wg.Wait()
}

// maxLatencies bounds the latencies a loadRun keeps between two
// takeLatencies.
const maxLatencies = 1 << 20

// takeLatencies returns the latencies of the requests answered since the
// last call, sorted.
func (r *loadRun) takeLatencies() []time.Duration {
	r.mu.Lock()
	l := r.lat
	r.lat = nil
	r.mu.Unlock()
	slices.Sort(l)
	return l
}

// deniedNow returns how many 429s each tenant got so far.
func (r *loadRun) deniedNow() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.denied)
}

// waitDenied waits until every tenant of ts was answered 429 more often
// than since says (nil: at least once): it has spent its bucket.
func (r *loadRun) waitDenied(ts []string, since map[string]int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		var left []string
		for _, tn := range ts {
			if r.denied[tn] <= since[tn] {
				left = append(left, tn)
			}
		}
		r.mu.Unlock()
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tenants %v never rate limited within %v", left, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitAccepted waits until n more hooks than now were answered 2xx.
func (r *loadRun) waitAccepted(n int64, timeout time.Duration) error {
	want := r.accepted.Load() + n
	deadline := time.Now().Add(timeout)
	for r.accepted.Load() < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d more hooks accepted within %v", r.accepted.Load()-want+n, n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (r *loadRun) String() string {
	return fmt.Sprintf("%d requests, %d answered 2xx, %d malformed, %d without answer, %d hooks given up",
		r.sent.Load(), r.accepted.Load(), r.bad.Load(), r.errs.Load(), r.gaveUp.Load())
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
