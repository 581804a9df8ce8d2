package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestServerStall freezes (SIGSTOP) the nats-server that node 1 is
// connected to, under load. While it is frozen:
//   - every quota call of every node (Fleet.Hit with a claim, Client's
//     Reserve and Count) returns within its budget + callSlack (a fixed
//     slack), with a node-local fallback answer when the fleet cannot
//     answer a hit (node 1 falls back) or ErrUnavailable (a
//     claim its frozen server cannot take; a counter call, which has no
//     fallback), never another error;
//   - the edge of node 1, which cannot store anything, answers hooks 503
//     with a Retry-After of at least one second, never 2xx;
//   - the other nodes keep accepting hooks.
//
// The freeze lasts until it has done its work, not for a fixed while:
// every stream the frozen server led has a new leader,
// every node made stallCalls calls of each kind that started after the
// freeze, and node 1 went to its fallback for some of them (bounded:
// 60 s).
//
// After SIGCONT the fleet recovers and the invariants hold. (A hook
// answered 503 may still be stored once the server resumes and reads the
// publish it had buffered: at-least-once, counted as "extra stored".)
func TestServerStall(t *testing.T) {
	t.Parallel()
	const budget = 250 * time.Millisecond
	h := Start(t, Options{ServerProcs: true, Args: []string{"--store-timeout", budget.String()}})
	const victim = 1
	l := NewLedger()
	run := h.startHooks(l, hookLoad{Tenants: []string{"a", "b", "c", "d"}, Workers: 6, Nodes: []int{0, 2}, Redeliver: true, Pace: 5 * time.Millisecond})
	defer run.stop()
	if err := run.waitAccepted(100, 30*time.Second); err != nil {
		t.Fatal(err)
	}

	// Quota calls on every node, timed, for the whole stall.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	local := map[string]int{}
	var callErrs []string
	errsPer := map[string]int{}
	// Calls that started after the freeze (frozenAt: its UnixNano, 0
	// before), and those of them answered from the fallback.
	var frozenAt atomic.Int64
	after, afterLocal := map[string]int{}, map[string]int{}
	lim, _ := gcra.LimitFromRate(1e6, 1e6)
	var wg sync.WaitGroup
	for ni, n := range h.Nodes() {
		for w := range 3 {
			wg.Go(func() {
				f := n.Quota.Fleet
				for i := 0; ctx.Err() == nil; i++ {
					tenant := "q" + strconv.Itoa(i%16)
					var op string
					var isLocal bool
					var err error
					cctx, ccancel := context.WithTimeout(context.Background(), budget)
					start := time.Now()
					switch i % 3 {
					case 0:
						op = "hit"
						var rep protocol.HitReply
						rep, err = f.Hit(cctx, protocol.HitRequest{
							Charges: []protocol.Charge{{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: lim.Increment, CapacityUs: lim.Capacity}},
							Claim:   &protocol.ClaimRequest{Tenant: tenant, Source: "s", Key: fmt.Sprintf("stall-%d-%d-%d", ni, w, i), HookID: fmt.Sprintf("h-%d-%d-%d", ni, w, i)},
						})
						// The fallback ran: answered locally, or unavailable
						// because the victim's claim store is frozen too.
						isLocal = rep.Fallback || f.Degraded()
					case 1:
						op = "reserve"
						_, err = n.Quota.Router.Reserve(cctx, protocol.ReserveRequest{Principal: tenant, Key: "slots", Max: 1 << 30})
					default:
						op = "count"
						_, err = n.Quota.Router.Count(cctx, protocol.CounterRequest{Principal: tenant, Key: "slots"})
					}
					d := time.Since(start)
					ccancel()
					key := fmt.Sprintf("node %d %s", ni, op)
					mu.Lock()
					lat[key] = append(lat[key], d)
					if isLocal {
						local[key]++
					}
					if fa := frozenAt.Load(); fa != 0 && start.UnixNano() > fa {
						after[key]++
						if isLocal {
							afterLocal[key]++
						}
					}
					if err != nil {
						errsPer[key]++
						if !errors.Is(err, protocol.ErrUnavailable) && len(callErrs) < 10 {
							callErrs = append(callErrs, fmt.Sprintf("%s: %v", key, err))
						}
					}
					mu.Unlock()
					sleepCtx(ctx, 5*time.Millisecond)
				}
			})
		}
	}
	// A baseline before the stall: every node has made a few calls of
	// every kind.
	testkit.Eventually(t, 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(lat) < 3*len(h.Nodes()) {
			return false
		}
		for _, ds := range lat {
			if len(ds) < 5 {
				return false
			}
		}
		return true
	}, "a baseline of 5 calls of each kind on every node")

	// The streams the victim leads (read through server 0's connection:
	// the test's own may sit on the victim): the freeze lasts until the
	// others have elected a new leader for each.
	js0 := testkit.JetStream(t, testkit.Dial(t, h.ServerURL(0), nats.Timeout(2*time.Second)))
	victimName := fmt.Sprintf("s%d", victim)
	led := streamsLedBy(t, js0, victimName)

	h.FreezeServer(victim)
	frozen := time.Now()
	frozenAt.Store(frozen.UnixNano())
	// Hooks sent to the node whose server is frozen: 503, never 2xx.
	type answer struct {
		code  int
		retry string
		took  time.Duration
		err   error
	}
	answers := make([]answer, 8)
	var hw sync.WaitGroup
	for i := range answers {
		hw.Go(func() {
			k := HookKey{"stalled", "s", "stall-hook-" + strconv.Itoa(i)}
			start := time.Now()
			code, id, hdr, err := h.postHook(context.Background(), victim, k, []byte(`{}`))
			answers[i] = answer{code: code, retry: hdr.Get("Retry-After"), took: time.Since(start), err: err}
			if err != nil && code != 0 {
				l.Bad(k, code, err.Error())
			} else {
				l.Hook(k, code, id)
			}
		})
	}
	hw.Wait()
	// Stay frozen until the fault has done its work (a
	// condition, not a fixed 3 s): every stream the victim led has a new
	// leader on another server, every node made stallCalls calls of each
	// kind that started after the freeze, and the victim's node answered
	// some of them from its fallback.
	var lastWhy string
	effective := func() bool {
		mu.Lock()
		lastWhy = ""
		for ni := range h.Nodes() {
			for _, op := range []string{"hit", "reserve", "count"} {
				if n := after[fmt.Sprintf("node %d %s", ni, op)]; n < stallCalls && lastWhy == "" {
					lastWhy = fmt.Sprintf("node %d: %d %s calls since the freeze", ni, n, op)
				}
			}
		}
		localSince := 0
		for _, op := range []string{"hit", "reserve", "count"} {
			key := fmt.Sprintf("node %d %s", victim, op)
			localSince += afterLocal[key]
		}
		mu.Unlock()
		if lastWhy == "" && localSince == 0 {
			lastWhy = fmt.Sprintf("node %d went to its fallback for no call since the freeze", victim)
		}
		if lastWhy == "" {
			for _, name := range led {
				if l := streamLeader(js0, name); l == "" || l == victimName {
					lastWhy = fmt.Sprintf("stream %s led by %q", name, l)
					break
				}
			}
		}
		return lastWhy == ""
	}
	for deadline := time.Now().Add(scaleD(60 * time.Second)); !effective(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("server %d frozen %v: the freeze has not taken effect: %s", victim, time.Since(frozen).Round(time.Millisecond), lastWhy)
		}
	}
	stalledFor := time.Since(frozen)
	h.ThawServer(victim)
	thawed := time.Now()
	cancel()
	wg.Wait()
	for i, a := range answers {
		if a.err != nil || a.code != 503 {
			t.Errorf("hook %d to the node of the frozen server: status %d, error %v after %v; want 503", i, a.code, a.err, a.took)
		} else if n, err := strconv.Atoi(a.retry); err != nil || n < 1 {
			t.Errorf("hook %d to the node of the frozen server: 503 with Retry-After %q; want whole seconds >= 1", i, a.retry)
		} else {
			t.Logf("hook %d to the node of the frozen server: %d, Retry-After %s, after %v", i, a.code, a.retry, a.took.Round(time.Millisecond))
		}
	}
	t.Logf("server %d frozen for %v (until %d streams it led had new leaders, every node had made %d calls of each kind into the freeze, node %d had gone to its fallback)", victim, stalledFor.Round(time.Millisecond), len(led), stallCalls, victim)

	// Every call within its budget + a fixed slack. Under the race
	// detector, with three servers and three edge processes on two cores,
	// a call ends up to ~52 ms after its budget (measured; the machine
	// shared with other test runs), 77 ms with a whole-tree build running
	// beside: callSlack is 125 ms there, 25 ms without -race.
	keys := make([]string, 0, len(lat))
	for k := range lat {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ds := lat[k]
		slices.Sort(ds)
		worst := ds[len(ds)-1]
		t.Logf("%s: %d calls, %d answered locally, %d unavailable, p50 %v, p99 %v, max %v", k, len(ds), local[k], errsPer[k],
			ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)*99/100].Round(time.Microsecond), worst.Round(time.Microsecond))
		if worst > budget+callSlack {
			t.Errorf("%s: a call took %v, budget %v + %v", k, worst, budget, callSlack)
		}
	}
	for _, e := range callErrs {
		t.Errorf("call error other than unavailable: %s", e)
	}
	// The node whose server froze went to its fallback.
	if n := local[fmt.Sprintf("node %d count", victim)] + local[fmt.Sprintf("node %d reserve", victim)] + local[fmt.Sprintf("node %d hit", victim)]; n == 0 {
		t.Errorf("node %d (frozen server) went to its fallback for no quota call", victim)
	}

	// Recovery.
	h.WaitServed(t, 30*time.Second, h.AllPartitions()...)
	t.Logf("every partition served %v after SIGCONT", time.Since(thawed).Round(time.Millisecond))
	if err := run.waitAccepted(100, 30*time.Second); err != nil {
		t.Fatalf("after SIGCONT: %v", err)
	}
	var code int
	var err error
	testkit.Eventually(t, 30*time.Second, func() bool {
		code, _, err = h.PostHook(context.Background(), victim, HookKey{"stalled", "s", "after"}, []byte(`{}`))
		return err == nil && (code == 202 || code == 200)
	}, fmt.Sprintf("node %d accepts a hook after SIGCONT", victim))
	run.stop()
	t.Logf("load: %s", run)
	h.CheckHooks(t, l, false)
}

// stallCalls is how many quota calls of each kind every node must have
// started during TestServerStall's freeze before it ends.
const stallCalls = 10

// streamsLedBy lists the streams whose leader is server name.
func streamsLedBy(t *testing.T, js jetstream.JetStream, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var led []string
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		if streamLeader(js, n) == name {
			led = append(led, n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatalf("stream names: %v", err)
	}
	slices.Sort(led)
	return led
}

// streamLeader is the name of the stream's leader ("" when unknown).
func streamLeader(js jetstream.JetStream, stream string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}
