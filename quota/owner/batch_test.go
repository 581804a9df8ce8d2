package owner

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/coalesce"
	"github.com/sluice-dev/sluice/quota/internal/frame"
	"github.com/sluice-dev/sluice/testkit"
)

// tenantsIn returns n distinct tenants of partition p (of protocol.DefaultPartitions).
func tenantsIn(p, n int, stem string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if s := stem + strconv.Itoa(i); quota.Partition(s, protocol.DefaultPartitions) == p {
			out = append(out, s)
		}
	}
	return out
}

// frameExchange sends a raw frame to subject and collects reply frames
// until the last one (More unset), which must have answered every one of
// want items, each once. Nothing of the frame may follow its last reply:
// a second frame sent afterwards to the same inbox — one invalid item,
// which changes nothing — must be what answers next, so any reply of the
// first that came late shows up ahead of it (no window of time stands for
// "nothing happens").
func frameExchange(t *testing.T, nc *nats.Conn, subject string, req []byte, want int) map[int]frame.ReplyAnswer {
	t.Helper()
	inbox := nc.NewInbox()
	ch := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	got := exchangeOnce(t, nc, ch, subject, inbox, req)
	if len(got) != want {
		t.Fatalf("the last reply came with %d of %d items answered", len(got), want)
	}
	bad := protocol.HitRequest{Claim: &protocol.ClaimRequest{Tenant: "t", Source: "s", Key: "k", HookID: "h", PendingTTLMs: -1}}
	it := hitItem(&bad, 0, 1000)
	next := exchangeOnce(t, nc, ch, subject, inbox, frame.AppendItem(frame.AppendRequestHeader(nil, 1), &it))
	if a, ok := next[0]; len(next) != 1 || !ok || a.Status != frame.StatusInvalid {
		t.Fatalf("after the last reply, the next frame's replies hold %d answers (%+v): a reply of the first came late", len(next), next)
	}
	return got
}

// exchangeOnce sends req and collects its answers until the reply frame
// without More (or a timeout).
func exchangeOnce(t *testing.T, nc *nats.Conn, ch chan *nats.Msg, subject, inbox string, req []byte) map[int]frame.ReplyAnswer {
	t.Helper()
	if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: req}); err != nil {
		t.Fatal(err)
	}
	got := map[int]frame.ReplyAnswer{}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-ch:
			if !frame.Is(m.Data) {
				t.Fatalf("reply is not a frame: headers %v data %q", m.Header, m.Data)
			}
			f, err := frame.DecodeReply(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			for range f.Count {
				var a frame.ReplyAnswer
				if err := f.Next(&a); err != nil {
					t.Fatal(err)
				}
				if _, dup := got[a.Index]; dup {
					t.Fatalf("item %d answered twice", a.Index)
				}
				a.Reason = append([]byte(nil), a.Reason...)
				a.HookID = append([]byte(nil), a.HookID...)
				got[a.Index] = a
			}
			if !f.Done() {
				t.Fatal("trailing bytes in a reply frame")
			}
			if !f.More {
				return got
			}
		case <-timeout:
			t.Fatalf("no last reply within 10 s (%d items answered)", len(got))
		}
	}
}

func TestFrameMixedItems(t *testing.T) {
	t.Parallel()
	k, e, w, c := single(t)
	ctx := testkit.Context(t)
	ts := tenantsIn(5, 4, "mixed-")
	// ts[1] is exhausted first (burst 1).
	if rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks(ts[1], 1)}}); err != nil || rep.Result != protocol.ResultOK {
		t.Fatalf("setup: %+v %v", rep, err)
	}
	// A committed claim for a duplicate.
	dupID := claims.ID{Tenant: ts[3], Source: "gh", Key: "dup"}
	res, err := e.store.Claim(ctx, dupID, "first", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Settle(ctx, dupID, "first", res.Revision, time.Hour); err != nil {
		t.Fatal(err)
	}
	items := []protocol.HitRequest{
		0: {Charges: []protocol.Charge{hooks(ts[0], 2)}},                                                                                         // ok
		1: {Charges: []protocol.Charge{hooks(ts[1], 1)}},                                                                                         // rate_limited
		2: {Charges: []protocol.Charge{{Kind: protocol.KindBytes, Tenant: ts[2], IncrementUs: 11, CapacityUs: 10}}},                              // invalid
		3: {Charges: []protocol.Charge{hooks(ts[0], 2)}, Claim: &protocol.ClaimRequest{Tenant: ts[0], Source: "gh", Key: "new", HookID: "h3"}},   // ok + claim
		4: {Charges: []protocol.Charge{hooks(ts[0], 2)}, Claim: &protocol.ClaimRequest{Tenant: ts[0], Source: "gh", Key: "other", HookID: "h4"}}, // denied: burst spent by 0 and 3
		5: {Charges: []protocol.Charge{hooks(ts[3], 5)}, Claim: &protocol.ClaimRequest{Tenant: ts[3], Source: "gh", Key: "dup", HookID: "h5"}},   // duplicate, refunded
		6: {Charges: []protocol.Charge{hooks(ts[2], 1), hooks(ts[2], 1)}},                                                                        // invalid: kind twice
		7: {Charges: []protocol.Charge{hooks("elsewhere", 1)}},                                                                                   // misrouted (claims partition 5)
		8: {Claim: &protocol.ClaimRequest{Tenant: ts[2], Source: "gh", Key: "bad-ttl", HookID: "h8", PendingTTLMs: -1}},                          // invalid
	}
	fr := frame.AppendRequestHeader(nil, len(items))
	for i := range items {
		it := hitItem(&items[i], 5, 1000)
		fr = frame.AppendItem(fr, &it)
	}
	if quota.Partition("elsewhere", protocol.DefaultPartitions) == 5 {
		t.Fatal("pick another misrouted tenant")
	}
	got := frameExchange(t, k.Conn, quota.MemberSubject(e.prefix, w.ID()), fr, len(items))
	want := []struct {
		status byte
		result string
	}{
		{frame.StatusAnswered, protocol.ResultOK}, {frame.StatusAnswered, protocol.ResultRateLimited}, {frame.StatusInvalid, ""}, {frame.StatusAnswered, protocol.ResultOK},
		{frame.StatusAnswered, protocol.ResultRateLimited}, {frame.StatusAnswered, protocol.ResultDuplicate}, {frame.StatusInvalid, ""}, {frame.StatusInvalid, ""}, {frame.StatusInvalid, ""},
	}
	for i, w := range want {
		a := got[i]
		if a.Status != w.status || w.status == frame.StatusAnswered && quota.ResultName(a.Result) != w.result {
			t.Errorf("item %d: status %d result %v reason %q; want %d %s", i, a.Status, quota.ResultName(a.Result), a.Reason, w.status, w.result)
		}
	}
	if a := got[0]; a.NLimits != 1 || a.Limits[0].Remaining != 1 {
		t.Errorf("item 0 limits %+v", a.Limits[:a.NLimits])
	}
	if a := got[3]; a.Revision == 0 || string(a.HookID) != "h3" || a.NLimits != 1 || a.Limits[0].Remaining != 0 {
		t.Errorf("item 3: %+v", a)
	}
	if a := got[5]; string(a.HookID) != "first" {
		t.Errorf("item 5 hook id %q", a.HookID)
	}
	// Nothing of the duplicate, the denials or the invalid items was spent:
	// ts[3] has its whole burst of 5, ts[2] its burst of 1.
	for _, r := range []protocol.HitRequest{{Charges: []protocol.Charge{hooks(ts[3], 5)}}, {Charges: []protocol.Charge{hooks(ts[2], 1)}}} {
		rep, err := c.Hit(ctx, r)
		if err != nil || rep.Result != protocol.ResultOK || rep.Limits[0].Remaining != r.Charges[0].CapacityUs/r.Charges[0].IncrementUs-1 {
			t.Errorf("after the frame, %s: %+v %v", r.Charges[0].Tenant, rep, err)
		}
	}
	// A frame that does not parse is one 400, like malformed JSON.
	wantRefused(t, k.Conn, quota.MemberSubject(e.prefix, w.ID()), []byte{frame.Magic, frame.Version, 1, 9}, "malformed frame")
}

// holdLane makes the lane of partition n gather (as if its window were
// full) and returns a function that sends what gathered as one frame.
func holdLane(c *quota.Router, n int) (queued func() int, flush func()) { return c.Coalescer().Hold(n) }

func TestCoalescedCallsShareAFrame(t *testing.T) {
	t.Parallel()
	_, _, _, c := single(t)
	ctx := testkit.Context(t)
	ts := tenantsIn(9, 3, "co-")
	queued, flush := holdLane(c, 9)
	type res struct {
		rep protocol.HitReply
		err error
	}
	calls := []protocol.HitRequest{
		{Charges: []protocol.Charge{hooks(ts[0], 1)}},
		{Charges: []protocol.Charge{hooks(ts[0], 1)}}, // the same bucket: one of the two is denied
		{Charges: []protocol.Charge{hooks(ts[1], 3)}, Claim: &protocol.ClaimRequest{Tenant: ts[1], Source: "s", Key: "same", HookID: "a"}},
		{Charges: []protocol.Charge{hooks(ts[2], 3)}, Claim: &protocol.ClaimRequest{Tenant: ts[2], Source: "s", Key: "same", HookID: "b"}},
		{Charges: []protocol.Charge{hooks(ts[1], 3)}, Claim: &protocol.ClaimRequest{Tenant: ts[1], Source: "s", Key: "same", HookID: "c"}},
	}
	out := make([]res, len(calls))
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			rep, err := c.Hit(ctx, calls[i])
			out[i] = res{rep, err}
		})
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return queued() == len(calls) }, "all calls queued in the lane")
	frames := c.Coalescer().Frames()
	flush()
	wg.Wait()
	if n := c.Coalescer().Frames() - frames; n != 1 {
		t.Fatalf("%d frames for %d coalesced calls", n, len(calls))
	}
	results := map[string]int{}
	for i, r := range out[:2] {
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		results[r.rep.Result]++
	}
	if results[protocol.ResultOK] != 1 || results[protocol.ResultRateLimited] != 1 {
		t.Errorf("two charges of a burst-1 bucket in one frame: %v", results)
	}
	// ts[1] and ts[2] are different tenants: keys differ; ts[1]'s two claims
	// on one key: one ok, one pending (the other's claim in flight).
	if out[3].err != nil || out[3].rep.Result != protocol.ResultOK {
		t.Errorf("ts[2] claim: %+v %v", out[3].rep, out[3].err)
	}
	results = map[string]int{}
	for _, r := range []res{out[2], out[4]} {
		if r.err != nil {
			t.Fatal(r.err)
		}
		results[r.rep.Result]++
	}
	if results[protocol.ResultOK] != 1 || results[protocol.ResultPending] != 1 {
		t.Errorf("two claims of one key in one frame: %v", results)
	}
	// The pending one was refunded: ts[1] spent exactly one of 3.
	rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks(ts[1], 3)}})
	if err != nil || rep.Limits[0].Remaining != 1 {
		t.Errorf("ts[1] after the frame: %+v %v", rep, err)
	}
}

func TestLoneHitIsSentAtOnce(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	prefix := newPrefix()
	// A fake owner that records the frames it gets and answers ok.
	var mu sync.Mutex
	var sizes []int
	sub, err := k.Conn.Subscribe(prefix+".v1.quota.p.*", func(m *nats.Msg) {
		items, err := frame.DecodeRequest(m.Data, nil)
		if err != nil {
			t.Errorf("decode: %v", err)
			return
		}
		mu.Lock()
		sizes = append(sizes, len(items))
		mu.Unlock()
		b := frame.AppendReplyHeader(nil, false, "", len(items))
		for i := range items {
			b = frame.AppendAnswer(b, &frame.Answer{Index: i, Result: 1})
		}
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	cnc := connect(t, k)
	c, err := quota.NewRouter(cnc, quota.WithPrefix(prefix), quota.WithBudget(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for i := range 50 {
		start := time.Now()
		rep, err := c.Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks("lone", 1)}})
		worst = max(worst, time.Since(start))
		if err != nil || rep.Result != protocol.ResultOK {
			t.Fatalf("hit %d: %+v %v", i, rep, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, n := range sizes {
		if n != 1 {
			t.Fatalf("frame %d carried %d items", i, n)
		}
	}
	if len(sizes) != 50 {
		t.Fatalf("%d frames for 50 serial hits", len(sizes))
	}
	t.Logf("50 serial hits, one frame each, slowest %v", worst)
}

// slowStore blocks claims of the key "slow" until released (or ctx ends),
// recording the deadline the owner gave them.
type slowStore struct {
	claims.Store
	release  chan struct{}
	deadline atomic.Int64 // time until the ctx deadline when the claim started, ns
}

func (s *slowStore) Claim(ctx context.Context, id claims.ID, hookID string, ttl time.Duration) (claims.Result, error) {
	if id.Key == "slow" {
		if dl, ok := ctx.Deadline(); ok {
			s.deadline.Store(int64(time.Until(dl)))
		}
		select {
		case <-s.release:
		case <-ctx.Done():
			return claims.Result{}, protocol.ErrUnavailable
		}
	}
	return s.Store.Claim(ctx, id, hookID, ttl)
}

// StartClaim starts nothing, so that every claim goes through Claim.
func (s *slowStore) StartClaim(claims.ID, string, time.Duration) (claims.StartedClaim, error) {
	return claims.NotStartedClaim(), nil
}

func TestBatchItemsKeepTheirDeadlines(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	store := &slowStore{Store: e.store, release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	w := e.newWorker(t, k.Conn, store, quota.WithRegisterer(reg))
	defer close(store.release)
	waitServed(t, 10*time.Second, w)
	c := e.client(t, k.Conn, quota.WithBudget(5*time.Second))
	ts := tenantsIn(3, 2, "dl-")
	queued, flush := holdLane(c, 3)

	type res struct {
		rep protocol.HitReply
		err error
		el  time.Duration
	}
	var short, long, quick res
	var wg sync.WaitGroup
	call := func(out *res, timeout time.Duration, r protocol.HitRequest) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		out.rep, out.err = c.Hit(ctx, r)
		out.el = time.Since(start)
	}
	slow := &protocol.ClaimRequest{Tenant: ts[0], Source: "s", Key: "slow", HookID: "h"}
	wg.Go(func() {
		call(&short, 300*time.Millisecond, protocol.HitRequest{Charges: []protocol.Charge{hooks(ts[0], 5)}, Claim: slow})
	})
	wg.Go(func() {
		call(&long, 3*time.Second, protocol.HitRequest{Charges: []protocol.Charge{hooks(ts[1], 5)}, Claim: &protocol.ClaimRequest{Tenant: ts[1], Source: "s", Key: "fast", HookID: "h"}})
	})
	wg.Go(func() { call(&quick, 3*time.Second, protocol.HitRequest{Charges: []protocol.Charge{hooks(ts[1], 5)}}) })
	testkit.Eventually(t, 5*time.Second, func() bool { return queued() == 3 }, "three calls queued")
	flush()
	wg.Wait()

	if quick.err != nil || quick.rep.Result != protocol.ResultOK || quick.el > time.Second {
		t.Errorf("charges-only item: %+v %v after %v", quick.rep, quick.err, quick.el)
	}
	if long.err != nil || long.rep.Result != protocol.ResultOK || long.el >= 250*time.Millisecond {
		t.Errorf("fast claim next to a slow one: %+v %v after %v (waited for the slow claim?)", long.rep, long.err, long.el)
	}
	if !errors.Is(short.err, protocol.ErrUnavailable) || short.el < 250*time.Millisecond || short.el > 2*time.Second {
		t.Errorf("slow claim, 300 ms deadline: %v after %v", short.err, short.el)
	}
	// The owner bounded the slow claim by that item's own deadline, not
	// the frame's latest one.
	if d := time.Duration(store.deadline.Load()); d <= 0 || d > 300*time.Millisecond {
		t.Errorf("owner gave the slow claim %v", d)
	}
	// It timed out at the owner: its charge was refunded. The owner refunds
	// before it counts the answer (claimJob.answer), so once it counted
	// the unavailable answer one probe decides: 5 of 5 left before it (4
	// after) when refunded, 4 (3) when not.
	testkit.Eventually(t, 10*time.Second, func() bool {
		return testkit.MetricSeries(t, reg, "sluice_quota_hits_total")["unavailable"] >= 1
	}, "the owner answered the timed-out claim")
	rep, err := c.Hit(testkit.Context(t), protocol.HitRequest{Charges: []protocol.Charge{hooks(ts[0], 5)}})
	if err != nil || len(rep.Limits) == 0 {
		t.Fatalf("probe: %+v %v", rep, err)
	}
	if rep.Limits[0].Remaining != 4 {
		t.Fatalf("after the timed-out claim: %d of 5 left after one probe, want 4 (its charge refunded)", rep.Limits[0].Remaining)
	}
}

func TestBatchStraddlingHandoff(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	nc1 := connect(t, k)
	nc2 := connect(t, k)
	reg1, reg2 := prometheus.NewRegistry(), prometheus.NewRegistry()
	w1 := e.startWorker(t, nc1, WithMemberID("one"), quota.WithRegisterer(reg1))
	waitServed(t, 10*time.Second, w1)
	c := e.client(t, k.Conn, quota.WithBudget(10*time.Second))

	// 32 callers hit 200 tenants (spread over the partitions) with unique
	// claims while a second worker joins (the first hands half its
	// partitions over) and then the first stops (it hands over the rest).
	var stop atomic.Bool
	var oks, sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				tenant := "h" + strconv.Itoa((g*7919+i)%200)
				r := protocol.HitRequest{Charges: []protocol.Charge{{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: 1, CapacityUs: 1 << 40}}}
				if i%4 == 0 {
					key := strconv.Itoa(g) + "-" + strconv.Itoa(i)
					r.Claim = &protocol.ClaimRequest{Tenant: tenant, Source: "s", Key: key, HookID: key}
				}
				sent.Add(1)
				rep, err := c.Hit(context.Background(), r)
				if err != nil {
					errs <- err
					return
				}
				if rep.Result != protocol.ResultOK {
					errs <- errors.New("result " + rep.Result)
					return
				}
				oks.Add(1)
			}
		})
	}
	// Each phase lasts until hits crossed it: answered before the join,
	// decided by the joining worker once the partitions are split, and
	// after the first worker stopped (answers beyond those counted then).
	decidedBy := func(reg *prometheus.Registry) float64 {
		return testkit.MetricSeries(t, reg, "sluice_quota_hits_total")["ok"]
	}
	testkit.Eventually(t, 15*time.Second, func() bool { return oks.Load() >= 100 }, "hits answered before the join")
	w2 := e.startWorker(t, nc2, WithMemberID("two"), quota.WithRegisterer(reg2))
	testkit.Eventually(t, 15*time.Second, func() bool { return allServed(w1, w2) && len(w1.Partitions()) > 0 && len(w2.Partitions()) > 0 }, "partitions split between the two")
	split := decidedBy(reg2)
	testkit.Eventually(t, 15*time.Second, func() bool { return decidedBy(reg2) >= split+100 }, "hits decided by the joining worker after the split")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := w1.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitServed(t, 15*time.Second, w2)
	handedOver := oks.Load()
	testkit.Eventually(t, 15*time.Second, func() bool { return oks.Load() >= handedOver+100 }, "hits answered after the first worker stopped")
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a hit failed across the handoff: %v", err)
	}
	// Every hit was decided exactly once: the owners counted as many ok
	// decisions as the callers got answers.
	decided := testkit.MetricSeries(t, reg1, "sluice_quota_hits_total")["ok"] +
		testkit.MetricSeries(t, reg2, "sluice_quota_hits_total")["ok"]
	if int64(decided) != oks.Load() || oks.Load() != sent.Load() {
		t.Fatalf("owners decided %v ok, callers got %d of %d", decided, oks.Load(), sent.Load())
	}
	t.Logf("%d hits across two handoffs, %d frames (%.1f hits/frame)", oks.Load(), c.Coalescer().Frames(), float64(c.Coalescer().Items())/float64(c.Coalescer().Frames()))
}

func TestBigHitsGoAsJSON(t *testing.T) {
	t.Parallel()
	_, _, _, c := single(t)
	ctx := testkit.Context(t)
	frames := c.Coalescer().Frames()
	key := string(make([]byte, coalesce.MaxItemBytes)) // NUL bytes: a valid key
	rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("big", 1)}, Claim: &protocol.ClaimRequest{Tenant: "big", Source: "s", Key: key, HookID: "h"}})
	if err != nil || rep.Result != protocol.ResultOK || rep.Revision == 0 {
		t.Fatalf("big claim: %+v %v", rep, err)
	}
	if c.Coalescer().Frames() != frames {
		t.Fatal("a hit over coalesce.MaxItemBytes went in a frame")
	}
}
