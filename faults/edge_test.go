package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// edgeProc is a cmd/edge process of the edge-mode scenario and the URL it
// listens on.
type edgeProc struct {
	p   *proc
	url string
}

// startEdgeProc starts cmd/edge with args (and the leaf token in its
// environment) and waits until it listens.
func startEdgeProc(t *testing.T, bin, name, token string, args ...string) *edgeProc {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "SLUICE_LEAF_TOKEN=" + token}
	p, err := startProc(t, name, bin, env, append(args, "--http-addr", "127.0.0.1:0", "--partitions", "4", "--log-format", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var url string
	if _, err := p.waitLine(60*time.Second, func(l string) bool {
		var rec struct{ Msg, URL string }
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "edge listening" {
			url = rec.URL
			return true
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	return &edgeProc{p: p, url: url}
}

// edgeStatus is the "edge" part of an edge's /readyz.
type edgeStatus struct {
	Status string `json:"status"`
	Edge   struct {
		Linked  bool   `json:"hub_linked"`
		Backlog uint64 `json:"backlog"`
		Quota   string `json:"quota"`
	} `json:"edge"`
}

func readyz(url string) (edgeStatus, int, error) {
	var s edgeStatus
	res, err := http.Get(url + "/readyz")
	if err != nil {
		return s, 0, err
	}
	defer res.Body.Close()
	err = json.NewDecoder(res.Body).Decode(&s)
	return s, res.StatusCode, err
}

// edgeLoad posts hooks with fresh keys to the edge that cur returns, from
// workers goroutines, recording every answer in l; every second hook is
// sent again after its 2xx (a provider's redelivery: 200 with the same id).
type edgeLoad struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64
	other    sync.Map // status (not 200/202/0) -> count
}

func startEdgeLoad(l *Ledger, cur func() string, workers int) *edgeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	r := &edgeLoad{cancel: cancel}
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(k HookKey) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cur()+"/v1/hooks/"+k.Tenant+"/"+k.Source, bytes.NewReader([]byte(`{"e":"edge"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", k.Key)
		res, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		defer res.Body.Close()
		var b struct{ ID string }
		_ = json.NewDecoder(res.Body).Decode(&b)
		if id := res.Header.Get("X-Hook-Id"); (res.StatusCode == 200 || res.StatusCode == 202) && id != b.ID {
			l.Bad(k, res.StatusCode, fmt.Sprintf("X-Hook-Id %q, body id %q", id, b.ID))
		}
		return res.StatusCode, b.ID
	}
	for w := range workers {
		r.wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				k := HookKey{"t" + strconv.Itoa(w%4), "s", fmt.Sprintf("e-%d-%d", w, i)}
				code, id := post(k)
				if ctx.Err() != nil && code == 0 {
					return
				}
				l.Hook(k, code, id)
				switch code {
				case 202, 200:
					r.accepted.Add(1)
					if i%2 == 0 {
						if code, id := post(k); code != 0 {
							l.Hook(k, code, id)
						}
					}
				case 0:
					sleepCtx(ctx, 20*time.Millisecond) // the edge is down
				default:
					n, _ := r.other.LoadOrStore(code, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
			}
		})
	}
	return r
}

func (r *edgeLoad) stop() { r.cancel(); r.wg.Wait() }

// storedOn reads every hook of the HOOKS stream of js.
func storedOn(t *testing.T, js jetstream.JetStream) []StoredHook {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatalf("HOOKS stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return readStored(t, ctx, st, info.State.Msgs)
}

// Edge mode with real processes: a hub and an edge leaf. The
// hub is killed (SIGKILL) under load and the edge keeps answering 202 from
// its outbox; the edge itself is killed and restarted during the outage;
// the hub comes back and the edge drains. Then every 202 is in the hub's
// HOOKS exactly once, under its tenant, source and key, with one winner
// per key, and no answer other than 200/202 (or none while the edge was
// down).
func TestEdgeHubOutage(t *testing.T) {
	bin, _ := binaries(t)
	ports := freePorts(t, 2)
	hubNATS, leaf := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	token := "faults-leaf-token-0123456789"
	hubDir, edgeDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte("defaults:\n  limits: {hooks: {rate: 100000, burst: 100000}, bytes: {rate: 1000000000, burst: 1000000000}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubArgs := []string{"--data-dir", hubDir, "--nats-listen", hubNATS, "--js-domain", "hub", "--leaf-listen", leaf, "--config", cfgPath}
	edgeArgs := []string{"--data-dir", edgeDir, "--nats-listen", "off", "--hub-url", "nats-leaf://" + leaf, "--edge-name", "e1", "--config", cfgPath}

	hub := startEdgeProc(t, bin, "hub", token, hubArgs...)
	ed := startEdgeProc(t, bin, "edge", token, edgeArgs...)
	var edgeURL atomic.Pointer[string]
	edgeURL.Store(&ed.url)
	waitStatus := func(what string, timeout time.Duration, ok func(edgeStatus) bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			s, code, err := readyz(*edgeURL.Load())
			if err == nil && code == 200 && ok(s) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("edge: not %s within %s (last %+v, %d, %v)", what, timeout, s, code, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// Linked, the hub's owners decide the edge's limits.
	waitStatus("linked, limits decided by the hub", 15*time.Second, func(s edgeStatus) bool { return s.Edge.Linked && s.Edge.Quota == "hub" })

	l := NewLedger()
	load := startEdgeLoad(l, func() string { return *edgeURL.Load() }, 8)
	phase := scaleD(1500 * time.Millisecond)
	time.Sleep(phase)

	hub.p.kill()
	waitStatus("unlinked (ready), limits decided by the edge", 10*time.Second, func(s edgeStatus) bool {
		return !s.Edge.Linked && s.Edge.Quota != "hub"
	})
	before := load.accepted.Load()
	time.Sleep(phase)
	duringOutage := load.accepted.Load() - before

	ed.p.kill() // SIGKILL during the outage, under load
	edges := []*edgeProc{ed}
	ed = startEdgeProc(t, bin, "edge", token, edgeArgs...)
	edges = append(edges, ed)
	edgeURL.Store(&ed.url)
	before = load.accepted.Load()
	time.Sleep(phase)
	duringOutage += load.accepted.Load() - before

	t0 := time.Now()
	startEdgeProc(t, bin, "hub", token, hubArgs...) // stopped by its cleanup
	time.Sleep(phase / 2)                           // load while the backlog drains
	load.stop()
	waitStatus("drained, limits decided by the hub again", 30*time.Second, func(s edgeStatus) bool {
		return s.Edge.Linked && s.Edge.Backlog == 0 && s.Edge.Quota == "hub"
	})
	drained := time.Since(t0)

	nc, err := nats.Connect("nats://" + hubNATS)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := l.Check(storedOn(t, js))
	reported := splitsReported(edges)
	t.Logf("hooks: %s; answers by status %v; %d accepted during the outage; hub restart to empty outbox %s; %d split keys reported by the edge",
		r, l.Codes(), duringOutage, drained.Round(time.Millisecond), len(reported))
	// A key may be accepted once per side of the split (a hook claimed on
	// the hub whose settle the hub's kill cut off, its redelivery claimed
	// on the edge): allowed, but never silently — the edge reports each.
	for _, v := range r.Violations(true) {
		t.Errorf("invariant broken: %s", v)
	}
	for _, k := range r.Split {
		ids := slices.Sorted(maps.Keys(l.Winners(k)))
		if len(ids) != 2 || !reported[[2]string{ids[0], ids[1]}] {
			t.Errorf("split key %s (winners %v) not reported by the edge", k, ids)
		}
	}
	if r.ExtraStored != len(r.Split) {
		t.Errorf("%d hooks stored beyond one per key, %d split keys (the load never resends a key it was not answered for)", r.ExtraStored, len(r.Split))
	}
	load.other.Range(func(k, v any) bool {
		t.Errorf("%d answers %v (only 202, 200, or none while the edge was down)", v.(*atomic.Int64).Load(), k)
		return true
	})
	if duringOutage < 50 {
		t.Errorf("only %d hooks accepted while the hub was down", duringOutage)
	}
}

// splitsReported are the hook id pairs (sorted) that the edges' logs
// report as one key accepted on both sides of a split.
func splitsReported(edges []*edgeProc) map[[2]string]bool {
	out := map[[2]string]bool{}
	for _, e := range edges {
		for _, line := range strings.Split(e.p.out.text(), "\n") {
			var rec struct {
				Msg       string `json:"msg"`
				HookID    string `json:"hook_id"`
				HubHookID string `json:"hub_hook_id"`
			}
			if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "edge: a dedupe key was accepted on both sides of a split" {
				continue
			}
			pair := []string{rec.HookID, rec.HubHookID}
			slices.Sort(pair)
			out[[2]string{pair[0], pair[1]}] = true
		}
	}
	return out
}
