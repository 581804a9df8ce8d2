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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
)

// edgeProc is a cmd/edge process of the edge-mode scenario and the URL it
// listens on.
type edgeProc struct {
	p   *proc
	url string
}

// leafToken is the secret of the fault tests' leaf connections.
const leafToken = "faults-leaf-token-0123456789"

// leafArgs are a hub's and its edge's flags for a leaf connection on leaf
// that signs in with leafToken, as docs/LEAF-MODE.md sets it up: the hub's
// --nats-config requires it ($NATS_LEAF_TOKEN, which startEdgeProc
// sets), the edge's names it in its remote's URL.
func leafArgs(t *testing.T, leaf string) (hub, edge []string) {
	t.Helper()
	dir := t.TempDir()
	conf := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return []string{"--leaf-listen", leaf, "--nats-config", conf("hub.conf", "leafnodes { authorization { user: sluice-leaf, password: $NATS_LEAF_TOKEN } }\n")},
		[]string{"--nats-config", conf("edge.conf", fmt.Sprintf("leafnodes { remotes: [ { url: \"nats-leaf://sluice-leaf:%s@%s\" } ] }\n", leafToken, leaf))}
}

// startEdgeProc starts cmd/edge with args (and the leaf token in its
// environment) and waits until it listens.
func startEdgeProc(t *testing.T, bin, name string, args ...string) *edgeProc {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "NATS_LEAF_TOKEN=" + leafToken}
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
	} `json:"leaf"`
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
// workers goroutines, recording every answer in l and its timing in
// answers; every second hook is sent again after its 2xx (a provider's
// redelivery: 200 with the same id).
type edgeLoad struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64
	other    sync.Map // status (not 200/202/0) -> count
	mu       sync.Mutex
	answers  []edgeAnswer
}

// edgeAnswer is one request of an edgeLoad: when it was sent and answered,
// to which edge, and its status (0: no answer).
type edgeAnswer struct {
	sent, answered time.Time
	url            string
	code           int
	redelivery     bool
}

func startEdgeLoad(l *Ledger, cur func() string, workers int) *edgeLoad {
	return startEdgeLoadKeys(l, cur, workers, "e")
}

// startEdgeLoadKeys is startEdgeLoad with keys "<prefix>-<worker>-<i>".
func startEdgeLoadKeys(l *Ledger, cur func() string, workers int, prefix string) *edgeLoad {
	ctx, cancel := context.WithCancel(context.Background())
	r := &edgeLoad{cancel: cancel}
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(k HookKey, redelivery bool) (int, string) {
		a := edgeAnswer{sent: time.Now(), url: cur(), redelivery: redelivery}
		defer func() {
			if ctx.Err() != nil && a.code == 0 {
				return // cut off by the end of the run
			}
			a.answered = time.Now()
			r.mu.Lock()
			r.answers = append(r.answers, a)
			r.mu.Unlock()
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/v1/hooks/"+k.Tenant+"/"+k.Source, bytes.NewReader([]byte(`{"e":"edge"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", k.Key)
		res, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		defer res.Body.Close()
		a.code = res.StatusCode
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
				k := HookKey{"t" + strconv.Itoa(w%4), "s", fmt.Sprintf("%s-%d-%d", prefix, w, i)}
				code, id := post(k, false)
				if ctx.Err() != nil && code == 0 {
					return
				}
				l.Hook(k, code, id)
				switch code {
				case 202, 200:
					r.accepted.Add(1)
					if i%2 == 0 {
						if code, id := post(k, true); code != 0 {
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

// count is the number of answers so far for which ok holds.
func (r *edgeLoad) count(ok func(edgeAnswer) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.answers {
		if ok(a) {
			n++
		}
	}
	return n
}

// waitAccepted waits (bounded) until n hooks for which ok holds were
// answered 202 (a new hook, not a redelivery), and returns how many were
// then.
func (r *edgeLoad) waitAccepted(t *testing.T, what string, n int, timeout time.Duration, ok func(edgeAnswer) bool) int {
	t.Helper()
	accepted := func(a edgeAnswer) bool { return a.code == 202 && !a.redelivery && ok(a) }
	deadline := time.Now().Add(timeout)
	for {
		got := r.count(accepted)
		if got >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d hooks accepted %s within %v", got, n, what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

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
// per key, and no answer other than 200/202 (or none, only for a request
// that crossed the edge's kill and restart).
//
// Each phase lasts until its event is seen, not for a fixed while:
// edgePhase hooks accepted linked; edgePhase hooks sent after
// the hub process was reaped and accepted by the first edge, then as many
// by the restarted edge; the edge's outbox then holds at least every hook
// accepted since the hub died (the backlog its /readyz measures: nothing
// of it reached the hub); then edgePhase hooks sent after the edge saw the
// hub again and accepted while the backlog drains.
func TestLeafHubOutage(t *testing.T) {
	bin, _ := binaries(t)
	ports := testkit.FreePorts(t, 2)
	hubNATS, leaf := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	hubDir, edgeDir := t.TempDir(), t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte("defaults:\n  limits: {hooks: {rate: 100000, burst: 100000}, bytes: {rate: 1000000000, burst: 1000000000}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubLeaf, edgeLeaf := leafArgs(t, leaf)
	hubArgs := append([]string{"--data-dir", hubDir, "--nats-listen", hubNATS, "--config", cfgPath}, hubLeaf...)
	edgeArgs := append([]string{"--data-dir", edgeDir, "--nats-listen", "off", "--leaf-name", "e1", "--config", cfgPath}, edgeLeaf...)

	hub := startEdgeProc(t, bin, "hub", hubArgs...)
	ed := startEdgeProc(t, bin, "edge", edgeArgs...)
	var edgeURL atomic.Pointer[string]
	edgeURL.Store(&ed.url)
	waitStatus := func(what string, timeout time.Duration, ok func(edgeStatus) bool) edgeStatus {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			s, code, err := readyz(*edgeURL.Load())
			if err == nil && code == 200 && ok(s) {
				return s
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
	n := scale(edgePhase)
	load.waitAccepted(t, "with the hub linked", n, 30*time.Second, func(edgeAnswer) bool { return true })

	hub.p.kill() // returns once the process is reaped
	hubDown := time.Now()
	waitStatus("unlinked (ready), limits decided by the edge", 10*time.Second, func(s edgeStatus) bool {
		return !s.Edge.Linked && s.Edge.Quota != "hub"
	})
	first := ed.url
	load.waitAccepted(t, "by the edge, sent after the hub's kill", n, 30*time.Second, func(a edgeAnswer) bool { return a.url == first && a.sent.After(hubDown) })

	edgeKilled := time.Now()
	ed.p.kill() // SIGKILL during the outage, under load
	edges := []*edgeProc{ed}
	ed = startEdgeProc(t, bin, "edge", edgeArgs...)
	edges = append(edges, ed)
	edgeURL.Store(&ed.url)
	edgeUp := time.Now()
	second := ed.url
	load.waitAccepted(t, "by the restarted edge, the hub down", n, 30*time.Second, func(a edgeAnswer) bool { return a.url == second })

	// Every hook accepted since the hub died waits in the edge's outbox:
	// the hub, dead, received none of them.
	duringOutage := load.count(func(a edgeAnswer) bool { return a.code == 202 && !a.redelivery && a.sent.After(hubDown) })
	held := waitStatus(fmt.Sprintf("holding the %d hooks accepted during the outage in its outbox", duringOutage), 10*time.Second, func(s edgeStatus) bool {
		return !s.Edge.Linked && s.Edge.Backlog >= uint64(duringOutage)
	})

	t0 := time.Now()
	startEdgeProc(t, bin, "hub", hubArgs...) // stopped by its cleanup
	// Load while the backlog drains: hooks sent once the edge sees the hub
	// again, accepted before the outbox is empty (checked below).
	waitStatus("linked again", 30*time.Second, func(s edgeStatus) bool { return s.Edge.Linked })
	relinked := time.Now()
	load.waitAccepted(t, "after the hub's return", n, 30*time.Second, func(a edgeAnswer) bool { return a.sent.After(relinked) })
	load.stop()
	// Drained: every hook answered 202 (and every id a 200 named) is in
	// the hub's HOOKS. Waited for on HOOKS itself: the backlog /readyz
	// shows is refreshed in the background and can still say 0 from
	// before the load's last hooks entered the outbox (seen: 225 hooks
	// "missing" read at once after such a 0).
	js := testkit.JetStream(t, testkit.Dial(t, "nats://"+hubNATS))
	var r Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = l.Check(storedOn(t, js))
		if len(r.Missing)+len(r.UnknownDuplicate) == 0 || time.Now().After(deadline) {
			break
		}
	}
	drained := time.Since(t0)
	waitStatus("drained, limits decided by the hub again", 30*time.Second, func(s edgeStatus) bool {
		return s.Edge.Linked && s.Edge.Backlog == 0 && s.Edge.Quota == "hub"
	})
	reported := splitsReported(edges)
	t.Logf("hooks: %s; answers by status %v; %d accepted during the outage (sent after the hub's kill, answered before its restart), outbox backlog then %d; edge down for %v; hub restart to every hook in HOOKS %s; %d split keys reported by the edge",
		r, l.Codes(), duringOutage, held.Edge.Backlog, edgeUp.Sub(edgeKilled).Round(time.Millisecond), drained.Round(time.Millisecond), len(reported))
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
	// No answer only for a request to the first edge that was still open
	// when it was killed (or sent to it after, before the load switched).
	unanswered := load.count(func(a edgeAnswer) bool { return a.code == 0 })
	outside := load.count(func(a edgeAnswer) bool {
		return a.code == 0 && (a.url != first || a.answered.Before(edgeKilled) || a.sent.After(edgeUp))
	})
	t.Logf("%d requests without an answer, all but %d while the edge was down", unanswered, outside)
	if outside > 0 {
		t.Errorf("%d requests without an answer outside the edge's kill and restart", outside)
	}
}

// edgePhase is how many hooks TestLeafHubOutage has accepted in each
// phase before it moves on (scale × under -faults.long).
const edgePhase = 300

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
			if json.Unmarshal([]byte(line), &rec) != nil || rec.Msg != "leaf: a dedupe key was accepted on both sides of a split" {
				continue
			}
			pair := []string{rec.HookID, rec.HubHookID}
			slices.Sort(pair)
			out[[2]string{pair[0], pair[1]}] = true
		}
	}
	return out
}
