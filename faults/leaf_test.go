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

// edgeProc is a cmd/edge process of the leaf-mode scenario and the URL it
// listens on.
type edgeProc struct {
	p   *proc
	url string
}

// leafToken is the secret of the fault tests' leaf connections.
const leafToken = "faults-leaf-token-0123456789"

// linkArgs are a hub's and its leaf's flags for a leaf connection on leaf
// that signs in with leafToken, as docs/LEAF-MODE.md sets it up: the hub's
// --nats-config requires it ($NATS_LEAF_TOKEN, which startEdgeProc
// sets), the leaf's names it in its remote's URL.
func linkArgs(t *testing.T, leaf string) (hub, node []string) {
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

// leafStatus is the "leaf" part of a leaf's /readyz.
type leafStatus struct {
	Status string `json:"status"`
	Leaf   struct {
		Linked  bool   `json:"hub_linked"`
		Backlog uint64 `json:"backlog"`
		Quota   string `json:"quota"`
	} `json:"leaf"`
}

func readyz(url string) (leafStatus, int, error) {
	var s leafStatus
	res, err := http.Get(url + "/readyz")
	if err != nil {
		return s, 0, err
	}
	defer res.Body.Close()
	err = json.NewDecoder(res.Body).Decode(&s)
	return s, res.StatusCode, err
}

// leafPair is a hub and a leaf linked to it (cmd/edge processes), and
// the flags that start each again.
type leafPair struct {
	hub, leaf         *edgeProc
	hubNATS           string // the hub's NATS address
	hubArgs, leafArgs []string
}

// startLeafPair starts a hub with its data in hubDir and a leaf linked to
// it, both under limits no test load reaches.
func startLeafPair(t *testing.T, bin, hubDir string) leafPair {
	t.Helper()
	ports := testkit.FreePorts(t, 2)
	hubNATS, leaf := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	cfgPath := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte("defaults:\n  limits: {hooks: {rate: 100000, burst: 100000}, bytes: {rate: 1000000000, burst: 1000000000}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hubLink, leafLink := linkArgs(t, leaf)
	p := leafPair{
		hubNATS:  hubNATS,
		hubArgs:  append([]string{"--data-dir", hubDir, "--nats-listen", hubNATS, "--config", cfgPath}, hubLink...),
		leafArgs: append([]string{"--data-dir", t.TempDir(), "--nats-listen", "off", "--leaf-name", "e1", "--config", cfgPath}, leafLink...),
	}
	p.hub = startEdgeProc(t, bin, "hub", p.hubArgs...)
	p.leaf = startEdgeProc(t, bin, "edge", p.leafArgs...)
	return p
}

// waitLeafStatus reads the /readyz of the leaf at url() until ok holds,
// failing the test after timeout.
func waitLeafStatus(t *testing.T, url func() string, what string, timeout time.Duration, ok func(leafStatus) bool) leafStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s, code, err := readyz(url())
		if err == nil && code == 200 && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("leaf: not %s within %s (last %+v, %d, %v)", what, timeout, s, code, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leafLoad posts hooks with fresh keys to the leaf that cur returns, from
// workers goroutines, recording every answer in l and its timing in
// answers; every second hook is sent again after its 2xx (a provider's
// redelivery: 200 with the same id).
type leafLoad struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	accepted atomic.Int64
	other    sync.Map // status (not 200/202/0) -> count
	mu       sync.Mutex
	answers  []leafAnswer
}

// leafAnswer is one request of a leafLoad: when it was sent and answered,
// to which edge, and its status (0: no answer).
type leafAnswer struct {
	sent, answered time.Time
	url            string
	code           int
	redelivery     bool
}

func startLeafLoad(l *Ledger, cur func() string, workers int) *leafLoad {
	return startLeafLoadKeys(l, cur, workers, "e")
}

// startLeafLoadKeys is startLeafLoad with keys "<prefix>-<worker>-<i>".
func startLeafLoadKeys(l *Ledger, cur func() string, workers int, prefix string) *leafLoad {
	ctx, cancel := context.WithCancel(context.Background())
	r := &leafLoad{cancel: cancel}
	client := &http.Client{Timeout: 5 * time.Second}
	post := func(k HookKey, redelivery bool) (int, string) {
		a := leafAnswer{sent: time.Now(), url: cur(), redelivery: redelivery}
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
					sleepCtx(ctx, 20*time.Millisecond) // the leaf is down
				default:
					n, _ := r.other.LoadOrStore(code, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
			}
		})
	}
	return r
}

func (r *leafLoad) stop() { r.cancel(); r.wg.Wait() }

// count is the number of answers so far for which ok holds.
func (r *leafLoad) count(ok func(leafAnswer) bool) int {
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
func (r *leafLoad) waitAccepted(t *testing.T, what string, n int, timeout time.Duration, ok func(leafAnswer) bool) int {
	t.Helper()
	accepted := func(a leafAnswer) bool { return a.code == 202 && !a.redelivery && ok(a) }
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

// Leaf mode with real processes: a hub and a leaf leaf. The
// hub is killed (SIGKILL) under load and the leaf keeps answering 202 from
// its outbox; the leaf itself is killed and restarted during the outage;
// the hub comes back and the leaf drains. Then every 202 is in the hub's
// HOOKS exactly once, under its tenant, source and key, with one winner
// per key, and no answer other than 200/202 (or none, only for a request
// that crossed the leaf's kill and restart).
//
// Each phase lasts until its event is seen, not for a fixed while:
// leafPhase hooks accepted linked; leafPhase hooks sent after
// the hub process was reaped and accepted by the first leaf, then as many
// by the restarted leaf; the leaf's outbox then holds at least every hook
// accepted since the hub died (the backlog its /readyz measures: nothing
// of it reached the hub); then leafPhase hooks sent after the leaf saw the
// hub again and accepted while the backlog drains.
func TestLeafHubOutage(t *testing.T) {
	bin, _ := binaries(t)
	lp := startLeafPair(t, bin, t.TempDir())
	hub, ed, hubArgs, leafArgs := lp.hub, lp.leaf, lp.hubArgs, lp.leafArgs
	var leafURL atomic.Pointer[string]
	leafURL.Store(&ed.url)
	waitStatus := func(what string, timeout time.Duration, ok func(leafStatus) bool) leafStatus {
		t.Helper()
		return waitLeafStatus(t, func() string { return *leafURL.Load() }, what, timeout, ok)
	}
	// Linked, the hub's owners decide the leaf's limits.
	waitStatus("linked, limits decided by the hub", 15*time.Second, func(s leafStatus) bool { return s.Leaf.Linked && s.Leaf.Quota == "hub" })

	l := NewLedger()
	load := startLeafLoad(l, func() string { return *leafURL.Load() }, 8)
	n := scale(leafPhase)
	load.waitAccepted(t, "with the hub linked", n, 30*time.Second, func(leafAnswer) bool { return true })

	hub.p.kill() // returns once the process is reaped
	hubDown := time.Now()
	waitStatus("unlinked (ready), limits decided by the leaf", 10*time.Second, func(s leafStatus) bool {
		return !s.Leaf.Linked && s.Leaf.Quota != "hub"
	})
	first := ed.url
	load.waitAccepted(t, "by the leaf, sent after the hub's kill", n, 30*time.Second, func(a leafAnswer) bool { return a.url == first && a.sent.After(hubDown) })

	leafKilled := time.Now()
	ed.p.kill() // SIGKILL during the outage, under load
	edges := []*edgeProc{ed}
	ed = startEdgeProc(t, bin, "edge", leafArgs...)
	edges = append(edges, ed)
	leafURL.Store(&ed.url)
	leafUp := time.Now()
	second := ed.url
	load.waitAccepted(t, "by the restarted leaf, the hub down", n, 30*time.Second, func(a leafAnswer) bool { return a.url == second })

	// Every hook accepted since the hub died waits in the leaf's outbox:
	// the hub, dead, received none of them.
	duringOutage := load.count(func(a leafAnswer) bool { return a.code == 202 && !a.redelivery && a.sent.After(hubDown) })
	held := waitStatus(fmt.Sprintf("holding the %d hooks accepted during the outage in its outbox", duringOutage), 10*time.Second, func(s leafStatus) bool {
		return !s.Leaf.Linked && s.Leaf.Backlog >= uint64(duringOutage)
	})

	t0 := time.Now()
	startEdgeProc(t, bin, "hub", hubArgs...) // stopped by its cleanup
	// Load while the backlog drains: hooks sent once the leaf sees the hub
	// again, accepted before the outbox is empty (checked below).
	waitStatus("linked again", 30*time.Second, func(s leafStatus) bool { return s.Leaf.Linked })
	relinked := time.Now()
	load.waitAccepted(t, "after the hub's return", n, 30*time.Second, func(a leafAnswer) bool { return a.sent.After(relinked) })
	load.stop()
	// Drained: every hook answered 202 (and every id a 200 named) is in
	// the hub's HOOKS. Waited for on HOOKS itself: the backlog /readyz
	// shows is refreshed in the background and can still say 0 from
	// before the load's last hooks entered the outbox (seen: 225 hooks
	// "missing" read at once after such a 0).
	js := testkit.JetStream(t, testkit.Dial(t, "nats://"+lp.hubNATS))
	var r Report
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r = l.Check(storedOn(t, js))
		if len(r.Missing)+len(r.UnknownDuplicate) == 0 || time.Now().After(deadline) {
			break
		}
	}
	drained := time.Since(t0)
	waitStatus("drained, limits decided by the hub again", 30*time.Second, func(s leafStatus) bool {
		return s.Leaf.Linked && s.Leaf.Backlog == 0 && s.Leaf.Quota == "hub"
	})
	reported := splitsReported(edges)
	t.Logf("hooks: %s; answers by status %v; %d accepted during the outage (sent after the hub's kill, answered before its restart), outbox backlog then %d; edge down for %v; hub restart to every hook in HOOKS %s; %d split keys reported by the leaf",
		r, l.Codes(), duringOutage, held.Leaf.Backlog, leafUp.Sub(leafKilled).Round(time.Millisecond), drained.Round(time.Millisecond), len(reported))
	// A key may be accepted once per side of the split (a hook claimed on
	// the hub whose settle the hub's kill cut off, its redelivery claimed
	// on the leaf): allowed, but never silently — the leaf reports each.
	for _, v := range r.Violations(true) {
		t.Errorf("invariant broken: %s", v)
	}
	for _, k := range r.Split {
		ids := slices.Sorted(maps.Keys(l.Winners(k)))
		if len(ids) != 2 || !reported[[2]string{ids[0], ids[1]}] {
			t.Errorf("split key %s (winners %v) not reported by the leaf", k, ids)
		}
	}
	if r.ExtraStored != len(r.Split) {
		t.Errorf("%d hooks stored beyond one per key, %d split keys (the load never resends a key it was not answered for)", r.ExtraStored, len(r.Split))
	}
	load.other.Range(func(k, v any) bool {
		t.Errorf("%d answers %v (only 202, 200, or none while the leaf was down)", v.(*atomic.Int64).Load(), k)
		return true
	})
	// No answer only for a request to the first leaf that was still open
	// when it was killed (or sent to it after, before the load switched).
	unanswered := load.count(func(a leafAnswer) bool { return a.code == 0 })
	outside := load.count(func(a leafAnswer) bool {
		return a.code == 0 && (a.url != first || a.answered.Before(leafKilled) || a.sent.After(leafUp))
	})
	t.Logf("%d requests without an answer, all but %d while the leaf was down", unanswered, outside)
	if outside > 0 {
		t.Errorf("%d requests without an answer outside the leaf's kill and restart", outside)
	}
}

// leafPhase is how many hooks TestLeafHubOutage has accepted in each
// phase before it moves on (scale × under -faults.long).
const leafPhase = 300

// splitsReported are the hook id pairs (sorted) that the leaves' logs
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
