package faults

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sluice-dev/sluice/testkit"
)

// TestDedupeRace runs 64-way races on one dedupe key, the racers spread
// over three edge processes, for many keys: exactly one 202 per key, every
// other racer (after retrying its 409s) gets 200 with the winner's id, and
// the stream holds exactly one hook per key. 1,000 keys; 200 under -race
// and -short (the racers' HTTP clients run in the race-checked test
// binary). A 409 is retried after 50 ms.
func TestDedupeRace(t *testing.T) {
	t.Parallel()
	keys, racers, parallel := scale(1000), 64, 4
	switch {
	case testing.Short():
		keys = 100
	case raceEnabled && !*longRun:
		keys = 100
	}
	// A pending claim whose holder never learned it won (its answer was
	// lost to a timeout under load) blocks the key until it expires: 5 s
	// here, so every key still gets its winner within a racer's 30 s.
	h := Start(t, Options{ServerProcs: true, NodeProcs: true, Args: []string{"--pending-ttl", "5s"}})
	l := NewLedger()
	var sent, conflicts, unavailable, noAnswer atomic.Int64
	body := []byte(`{"race":true}`)
	start := time.Now()
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key := HookKey{"race" + strconv.Itoa(k%7), "s", "key-" + strconv.Itoa(k)}
			var rw sync.WaitGroup
			gate := make(chan struct{})
			for r := range racers {
				rw.Go(func() {
					<-gate
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					for try := 0; ctx.Err() == nil; try++ {
						sent.Add(1)
						code, id, err := h.PostHook(ctx, (r+try)%3, key, body)
						if err != nil && code != 0 {
							l.Bad(key, code, err.Error())
							return
						}
						if err != nil {
							if noAnswer.Add(1) <= 5 {
								t.Errorf("%s: %v", key, err)
							}
							return
						}
						l.Hook(key, code, id)
						switch code {
						case 200, 202:
							return
						case 409:
							conflicts.Add(1)
						case 503:
							unavailable.Add(1)
						default:
							t.Errorf("%s: status %d", key, code)
							return
						}
						sleepCtx(ctx, 50*time.Millisecond)
					}
				})
			}
			close(gate)
			rw.Wait()
		})
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d keys × %d racers over 3 nodes: %d requests in %v (%.0f/s); %d answered 409 in_flight and retried, %d 503, %d without answer",
		keys, racers, sent.Load(), took.Round(time.Millisecond), float64(sent.Load())/took.Seconds(), conflicts.Load(), unavailable.Load(), noAnswer.Load())
	r := h.CheckHooks(t, l, false)
	h.LogSummary(t)
	if r.Accepted != keys || r.Keys != keys {
		t.Errorf("%d keys raced, %d hooks accepted for %d keys: want one winner each", keys, r.Accepted, r.Keys)
	}
	if r.ExtraStored != 0 || r.Stored != keys {
		t.Errorf("stream holds %d hooks (%d extra) for %d keys", r.Stored, r.ExtraStored, keys)
	}
}

// TestReserveRace runs 100 racers on one reserve counter (max 10) through
// the sluice service of three nodes while the counter's partition owner is
// killed (crash failover: its lease expires) and later restarted (the
// partition is handed back: graceful handoff). Counted from the clients'
// side, the slots held at once never exceed the max, and no grant returns a
// count above it. Four holders take a slot before the kill and keep it
// across the failover: the new owner must count them (reserve counts are
// written through to KV), or the racers would hold more than the 6 slots
// left. Each phase must grant again: at least 100 grants after the crash
// failover and 100 after the restart (measured 500–790 grants per 2 s on
// 2 shared vCPUs under -race).
//
// The counter's ttl_ms is 10 s, longer than the failover (≤ 6 s), so no
// held slot expires in the gap. The racers are between two cycles at the
// instant of the kill (they race again at once, through the gap): a slot a
// racer held when its owner died could not be released until a new owner
// serves, so it would stay taken until the counter's TTL — and six such
// leaked slots fill the counter until the TTL then frees every slot,
// the holders' too (found by this test; the known limit "a lost answer can
// hold a slot" in docs/RELIABILITY.md).
func TestReserveRace(t *testing.T) {
	t.Parallel()
	const racers, holders, maxSlots = 100, 4, 10
	const ttlMs = 10000
	// A budget of 1 s: 100 racers queue on one counter, whose owner writes
	// every change through to KV (R3) before it answers.
	h := Start(t, Options{ServerProcs: true, NodeProcs: true, Args: []string{"--store-timeout", "1s"}})
	part := 0
	principal := h.Principal("acct", part)
	victim := h.Owner(part)
	if victim < 0 {
		t.Fatalf("no owner for partition %d", part)
	}
	conns := make([]*nats.Conn, 3)
	for i := range conns {
		nc, err := nats.Connect(h.ServerURL(i), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[i] = nc
	}
	c := &Counter{Max: maxSlots}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errMu sync.Mutex
	errKinds := map[string]int{}
	call := func(nc *nats.Conn, subject string, req any, rep any) bool {
		data, _ := json.Marshal(req)
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		defer rcancel()
		m, err := nc.RequestWithContext(rctx, "sluice.v1.quota."+subject, data)
		kind := ""
		switch {
		case err != nil:
			kind = err.Error()
		case m.Header.Get(micro.ErrorCodeHeader) != "":
			kind = m.Header.Get(micro.ErrorCodeHeader) + " " + m.Header.Get(micro.ErrorHeader)
		default:
			if json.Unmarshal(m.Data, rep) == nil {
				return true
			}
			kind = "bad reply " + string(m.Data)
		}
		if i := strings.IndexAny(kind, ":("); i > 0 {
			kind = kind[:i]
		}
		errMu.Lock()
		errKinds[subject+": "+kind]++
		errMu.Unlock()
		return false
	}
	// cycle is read-locked by a racer for one reserve-hold-release cycle:
	// write-locking it waits until no racer holds a slot.
	var cycle sync.RWMutex
	var wg sync.WaitGroup
	for r := range racers {
		wg.Go(func() {
			nc := conns[r%3]
			for ctx.Err() == nil {
				cycle.RLock()
				var rep struct {
					Granted bool  `json:"granted"`
					Count   int64 `json:"count"`
				}
				if !call(nc, "reserve", map[string]any{"principal": principal, "key": "slots", "max": maxSlots, "ttl_ms": ttlMs}, &rep) {
					cycle.RUnlock()
					c.Failed()
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				if !rep.Granted {
					cycle.RUnlock()
					c.Denied()
					sleepCtx(ctx, 5*time.Millisecond)
					continue
				}
				c.Granted(rep.Count)
				sleepCtx(context.Background(), time.Duration(2+r%10)*time.Millisecond)
				c.Releasing()
				var rel struct {
					Count int64 `json:"count"`
				}
				if !call(nc, "release", map[string]any{"principal": principal, "key": "slots"}, &rel) {
					c.Leaked()
				}
				cycle.RUnlock()
			}
		})
	}
	// phase waits (bounded) until n more grants than now were counted.
	phase := func(what string, n int64) {
		t.Helper()
		before, start := c.Stats(), time.Now()
		testkit.Eventually(t, scaleD(30*time.Second), func() bool { return c.Stats().Grants-before.Grants >= n }, what+": grants")
		after := c.Stats()
		t.Logf("%s: %d grants, %d failed calls in %v", what, after.Grants-before.Grants, after.Failures-before.Failures, time.Since(start).Round(time.Millisecond))
	}
	phase("steady", int64(scale(50)))
	// The holders take their slots (retrying denials) and keep them
	// across the failover.
	held := make(chan struct{}, holders)
	releaseHeld := make(chan struct{})
	var hw sync.WaitGroup
	for i := range holders {
		hw.Go(func() {
			nc := conns[i%3]
			for ctx.Err() == nil {
				var rep struct {
					Granted bool  `json:"granted"`
					Count   int64 `json:"count"`
				}
				if call(nc, "reserve", map[string]any{"principal": principal, "key": "slots", "max": maxSlots, "ttl_ms": ttlMs}, &rep) && rep.Granted {
					c.Granted(rep.Count)
					held <- struct{}{}
					break
				}
				sleepCtx(ctx, 5*time.Millisecond)
			}
			select {
			case <-releaseHeld:
			case <-ctx.Done():
				return
			}
			c.Releasing()
			var rel struct {
				Count int64 `json:"count"`
			}
			if !call(nc, "release", map[string]any{"principal": principal, "key": "slots"}, &rel) {
				c.Leaked()
			}
		})
	}
	for range holders {
		select {
		case <-held:
		case <-time.After(scaleD(30 * time.Second)):
			t.Fatalf("the %d holders did not get their slots", holders)
		}
	}
	cycle.Lock()
	h.Node(victim).Kill()
	cycle.Unlock()
	killed := time.Now()
	took := h.WaitServed(t, 30*time.Second, part)
	t.Logf("owner node %d killed: partition %d served again after %v", victim, part, took.Round(time.Millisecond))
	if took > failoverBound {
		t.Errorf("partition served again after %v, above %v", took, failoverBound)
	}
	phase("after the crash failover, 4 slots held across it", int64(scale(100)))
	close(releaseHeld)
	hw.Wait()
	h.Node(victim).Restart(t)
	restarted := time.Now()
	phase("after the restart (the partition may be handed back)", int64(scale(100)))
	cancel()
	wg.Wait()
	t.Logf("owner of partition %d at the end: node %d (killed at +0s, restarted at +%v)", part, h.Owner(part), restarted.Sub(killed).Round(time.Millisecond))
	t.Logf("counter (max %d): %s", maxSlots, c.Stats())
	for k, n := range errKinds {
		t.Logf("failed calls: %d × %s", n, k)
	}
	for _, v := range c.Violations() {
		t.Errorf("invariant broken: %s", v)
	}
	var cnt struct {
		Count int64 `json:"count"`
	}
	if call(conns[0], "count", map[string]any{"principal": principal, "key": "slots"}, &cnt) {
		t.Logf("final count %d (slots whose release got no answer, or whose reserve answer was lost, stay taken until their TTL)", cnt.Count)
		if cnt.Count < 0 || cnt.Count > maxSlots {
			t.Errorf("final count %d outside 0..%d", cnt.Count, maxSlots)
		}
	}
}
