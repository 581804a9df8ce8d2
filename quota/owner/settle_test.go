package owner

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
	"github.com/sluice-dev/sluice/testkit"
)

// claimHit is a hit of tenant with a claim on key for hookID.
func claimHit(tenant, key, hookID string) protocol.HitRequest {
	return protocol.HitRequest{Charges: []protocol.Charge{hooks(tenant, 1000)}, Claim: &protocol.ClaimRequest{Tenant: tenant, Source: "s", Key: key, HookID: hookID}}
}

// settleOf is the settle of claim hit r's claim at rev.
func settleOf(r protocol.HitRequest, rev uint64) protocol.SettleRequest {
	c := r.Claim
	return protocol.SettleRequest{Tenant: c.Tenant, Source: c.Source, Key: c.Key, HookID: c.HookID, Revision: rev}
}

// mustHit is c.Hit wanting ok.
func mustHit(t *testing.T, c *quota.Router, r protocol.HitRequest) protocol.HitReply {
	t.Helper()
	rep, err := c.Hit(testkit.Context(t), r)
	if err != nil || rep.Result != protocol.ResultOK || rep.Revision == 0 {
		t.Fatalf("hit %+v: %+v %v", r.Claim, rep, err)
	}
	return rep
}

// hitClaim is mustHit of claimHit(tenant, key, hookID): the hit and its
// reply.
func hitClaim(t *testing.T, c *quota.Router, tenant, key, hookID string) (protocol.HitRequest, protocol.HitReply) {
	t.Helper()
	r := claimHit(tenant, key, hookID)
	return r, mustHit(t, c, r)
}

// claimState reads the claim of claim hit r.
func claimState(t *testing.T, store claims.Store, r protocol.HitRequest) claims.State {
	t.Helper()
	c := r.Claim
	st, err := store.Get(testkit.Context(t), claims.ID{Tenant: c.Tenant, Source: c.Source, Key: c.Key})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A settle after a hit rides a frame to the owner (no service runs here:
// the JSON fallback would find no responders), commits the claim for the
// hook id it names, with its TTL, and a later hit of the key is a
// duplicate naming it.
func TestSettleInAFrame(t *testing.T) {
	t.Parallel()
	_, e, w, c := single(t)
	ctx := testkit.Context(t)
	r, rep := hitClaim(t, c, "acme", "k-1", "hook-1")
	items := c.Coalescer().Items()
	s := settleOf(r, rep.Revision)
	s.TTLMs = 90_000
	if err := c.Settle(ctx, s); err != nil {
		t.Fatalf("settle: %v", err)
	}
	if c.Coalescer().Items() != items+1 {
		t.Fatalf("the settle did not go in a frame (%d items, then %d)", items, c.Coalescer().Items())
	}
	st := claimState(t, e.store, r)
	if st.State != protocol.StateCommitted || st.HookID != "hook-1" || st.ExpiresIn <= 60*time.Second || st.ExpiresIn > 90*time.Second {
		t.Fatalf("after the settle: %+v", st)
	}
	dup, err := c.Hit(ctx, claimHit("acme", "k-1", "hook-2"))
	if err != nil || dup.Result != protocol.ResultDuplicate || dup.HookID != "hook-1" {
		t.Fatalf("a redelivery: %+v %v", dup, err)
	}
	if w.grants.take(claims.ID{Tenant: "acme", Source: "s", Key: "k-1"}, "hook-1", rep.Revision) {
		t.Fatal("the settle left its grant behind")
	}
}

// Every settle the owner cannot commit is refused as claims.settle
// refuses it, and leaves the claim as it was.
func TestSettleRefusals(t *testing.T) {
	t.Parallel()
	_, e, _, c := single(t)
	ctx := testkit.Context(t)
	mustHit(t, c, claimHit("acme", "k-0", "hook-0")) // so that k-a's revision is not 1
	a := claimHit("acme", "k-a", "hook-a")
	repA := mustHit(t, c, a)

	// Another caller's hit of the key is pending, naming the holder and
	// its revision; settling with that revision under its own hook id
	// must not commit the claim for it.
	b := claimHit("acme", "k-a", "hook-b")
	pend, err := c.Hit(ctx, b)
	if err != nil || pend.Result != protocol.ResultPending || pend.Revision != repA.Revision {
		t.Fatalf("second hit: %+v %v", pend, err)
	}
	for _, tc := range []struct {
		name string
		s    protocol.SettleRequest
	}{
		{"another holder's revision", settleOf(b, pend.Revision)},
		{"a stale revision", settleOf(a, repA.Revision+1000)},
		{"an earlier revision", settleOf(a, repA.Revision-1)},
	} {
		if err := c.Settle(ctx, tc.s); !errors.Is(err, protocol.ErrClaimLost) {
			t.Errorf("%s: %v, want protocol.ErrClaimLost", tc.name, err)
		}
		if st := claimState(t, e.store, a); st.State != protocol.StatePending || st.HookID != "hook-a" || st.Revision != repA.Revision {
			t.Fatalf("%s changed the claim: %+v", tc.name, st)
		}
	}
	// The holder's settle still lands; a second one (a retry) is lost.
	if err := c.Settle(ctx, settleOf(a, repA.Revision)); err != nil {
		t.Fatalf("the holder's settle: %v", err)
	}
	if err := c.Settle(ctx, settleOf(a, repA.Revision)); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("a second settle: %v, want protocol.ErrClaimLost", err)
	}
	if st := claimState(t, e.store, a); st.State != protocol.StateCommitted || st.HookID != "hook-a" {
		t.Fatalf("after the settles: %+v", st)
	}
	// The client checks a settle before sending it.
	bad := settleOf(a, 0)
	if err := c.Settle(ctx, bad); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("revision 0: %v, want protocol.ErrInvalid", err)
	}
	bad = settleOf(a, repA.Revision)
	bad.TTLMs = -1
	if err := c.Settle(ctx, bad); !errors.Is(err, protocol.ErrInvalid) || !strings.Contains(err.Error(), "settle: ttl_ms must be >= 0, got -1") {
		t.Fatalf("ttl_ms -1: %v, want protocol.ErrInvalid naming the settle's ttl_ms", err)
	}
}

// The owner checks every settle item of a frame itself: a malformed one
// (revision 0, no hook id) or a misrouted one is answered invalid on its
// own, the other items of the frame are served.
func TestSettleItemsCheckedByTheOwner(t *testing.T) {
	t.Parallel()
	k, e, _, c := single(t)
	r, rep := hitClaim(t, c, "acme", "k-1", "hook-1")
	n := quota.Partition("acme", protocol.DefaultPartitions)
	b := frame.AppendRequestHeader(nil, 4)
	b = frame.AppendSettle(b, n, 1000, "acme", "s", "k-1", "hook-1", 0, 0)
	b = frame.AppendSettle(b, n, 1000, "acme", "s", "k-1", "", rep.Revision, 0)
	b = frame.AppendSettle(b, (n+1)%protocol.DefaultPartitions, 1000, "acme", "s", "k-1", "hook-1", rep.Revision, 0)
	b = frame.AppendSettle(b, n, 1000, "acme", "s", "k-1", "hook-1", rep.Revision, 0)
	got := frameAnswers(t, k.Conn, quota.PartitionSubject(e.prefix, n), b)
	want := []frame.Status{frame.StatusInvalid, frame.StatusInvalid, frame.StatusInvalid, frame.StatusAnswered}
	for i, st := range want {
		if a, ok := got[i]; !ok || a.Status != st || (st == frame.StatusAnswered && a.Result != frame.ResultOK) {
			t.Errorf("item %d: %+v, want status %d", i, a, st)
		}
	}
	if st := claimState(t, e.store, r); st.State != protocol.StateCommitted {
		t.Fatalf("the valid settle of the frame: %+v", st)
	}
}

// frameAnswers sends request frame data to subject and collects the
// answers of its replies by item index.
func frameAnswers(t *testing.T, nc *nats.Conn, subject string, data []byte) map[int]frame.ReplyAnswer {
	t.Helper()
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(subject, inbox, data); err != nil {
		t.Fatal(err)
	}
	out := map[int]frame.ReplyAnswer{}
	for {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("reply: %v (answers so far %v)", err, out)
		}
		f, err := frame.DecodeReply(m.Data)
		if err != nil {
			t.Fatalf("reply %q: %v", m.Data, err)
		}
		for range f.Count {
			var a frame.ReplyAnswer
			if err := f.Next(&a); err != nil {
				t.Fatal(err)
			}
			a.Reason = append([]byte(nil), a.Reason...)
			out[a.Index] = a
		}
		if !f.More {
			return out
		}
	}
}

// A settle of a claim this owner did not grant to a frame hit (here:
// taken straight in the store) is committed after the store reads its
// holder, as claims.settle does; one of another hook id is refused.
func TestSettleOfAClaimGrantedElsewhere(t *testing.T) {
	t.Parallel()
	_, e, _, c := single(t)
	ctx := testkit.Context(t)
	mustHit(t, c, claimHit("acme", "warm-up", "h0")) // the owner's reply says it serves settles
	id := claims.ID{Tenant: "acme", Source: "s", Key: "elsewhere"}
	res, err := e.store.Claim(ctx, id, "hook-x", time.Minute)
	if err != nil || res.Outcome != claims.OK {
		t.Fatalf("claim: %+v %v", res, err)
	}
	s := protocol.SettleRequest{Tenant: "acme", Source: "s", Key: "elsewhere", HookID: "hook-y", Revision: res.Revision}
	if err := c.Settle(ctx, s); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("another hook id: %v, want protocol.ErrClaimLost", err)
	}
	s.HookID = "hook-x"
	if err := c.Settle(ctx, s); err != nil {
		t.Fatalf("the holder: %v", err)
	}
	if st, _ := e.store.Get(ctx, id); st.State != protocol.StateCommitted || st.HookID != "hook-x" {
		t.Fatalf("after the settle: %+v", st)
	}
}

// gateSync is a Syncer a test opens, and makes fail as a failed round.
type gateSync struct {
	calls  atomic.Int64
	open   chan struct{}
	opened atomic.Bool
	fail   atomic.Bool
}

func (g *gateSync) release() {
	if g.opened.CompareAndSwap(false, true) {
		close(g.open)
	}
}

func (g *gateSync) Sync(ctx context.Context) error {
	g.calls.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	if g.fail.Load() {
		return kvstore.ErrSyncFailed
	}
	return nil
}

// round is Sync as a GroupSync's round (no ctx: release ends it).
func (g *gateSync) round() error { return g.Sync(context.Background()) }

// eachSyncWay runs test as a parallel subtest for each way a worker waits
// for its sync: a plain Syncer (the worker blocks in g's Sync) and the
// group sync over g's rounds. Each subtest has a gate of its own, closed
// until the test releases it, and a single worker syncing through it.
func eachSyncWay(t *testing.T, test func(t *testing.T, g *gateSync, c *quota.Router)) {
	t.Helper()
	for _, tc := range []struct {
		name string
		sync func(t *testing.T, g *gateSync) kvstore.Syncer
	}{
		{"a blocking Syncer", func(_ *testing.T, g *gateSync) kvstore.Syncer { return g }},
		{"the group sync", func(t *testing.T, g *gateSync) kvstore.Syncer {
			gs := kvstore.NewGroupSync(g.round)
			t.Cleanup(gs.Close)
			t.Cleanup(g.release) // before Close, also when the test fails early
			return gs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := &gateSync{open: make(chan struct{})}
			_, _, _, c := single(t, WithSync(tc.sync(t, g)))
			test(t, g, c)
		})
	}
}

// A settle is answered only once the sync after its write returned; a
// failed sync is unavailable (a 503, never an ok). Both ways a worker
// waits: a plain Syncer (a runner blocks in Sync) and the group sync,
// whose round's goroutine answers the frame's settles (kvstore.ThenSyncer).
func TestSettleWaitsForTheSync(t *testing.T) {
	t.Parallel()
	eachSyncWay(t, func(t *testing.T, g *gateSync, c *quota.Router) {
		ctx := testkit.Context(t)
		r, rep := hitClaim(t, c, "acme", "k-1", "hook-1")
		if g.calls.Load() != 0 {
			t.Fatalf("a pending claim was synced (%d calls): no 2xx rests on it", g.calls.Load())
		}
		done := make(chan error, 1)
		go func() { done <- c.Settle(ctx, settleOf(r, rep.Revision)) }()
		testkit.Eventually(t, 5*time.Second, func() bool { return g.calls.Load() == 1 }, "the settle waits on the sync")
		select {
		case err := <-done:
			t.Fatalf("the settle was answered before its sync returned: %v", err)
		default:
		}
		g.release()
		if err := <-done; err != nil {
			t.Fatalf("settle: %v", err)
		}

		g.fail.Store(true)
		r2, rep2 := hitClaim(t, c, "acme", "k-2", "hook-2")
		if err := c.Settle(ctx, settleOf(r2, rep2.Revision)); !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("a failed sync: %v, want protocol.ErrUnavailable", err)
		}
	})
}

// The grants record keeps within its bytes: a generation that would pass
// half of grantBytes becomes the old one, and the one before is dropped.
func TestGrantsBounded(t *testing.T) {
	g := newGrants()
	key := string(make([]byte, claims.MaxKeyBytes-5)) // with its suffix (≤ 5 bytes) stored as is (claims.NormalizeKey)
	per := grantOverhead + len("t") + len("s") + len(key) + len("h")
	n := 3 * grantBytes / per // three generations' worth
	for i := range n {
		g.put(claims.ID{Tenant: "t", Source: "s", Key: key + string(rune('a'+i%26)) + string(rune(i))}, "h", uint64(i+1))
	}
	if total := (len(g.cur) + len(g.old)) * per; total > grantBytes {
		t.Fatalf("%d entries, ~%d bytes, over %d", len(g.cur)+len(g.old), total, grantBytes)
	}
	last := claims.ID{Tenant: "t", Source: "s", Key: key + string(rune('a'+(n-1)%26)) + string(rune(n-1))}
	if g.take(last, "h", uint64(n+1)) || g.take(last, "x", uint64(n)) {
		t.Fatal("a grant was taken with another revision or hook id")
	}
	if !g.take(last, "h", uint64(n)) || g.take(last, "h", uint64(n)) {
		t.Fatal("the last grant is not taken exactly once")
	}
	first := claims.ID{Tenant: "t", Source: "s", Key: key + "a" + string(rune(0))}
	if g.take(first, "h", 1) {
		t.Fatal("the first grant outlived two generations")
	}
}

// A settle of a claim the owner granted, released meanwhile: its
// pipelined write is refused, and the full path says claim_lost (no
// commit appears).
func TestGrantedSettleOfAReleasedClaim(t *testing.T) {
	t.Parallel()
	_, e, _, c := single(t)
	ctx := testkit.Context(t)
	r, rep := hitClaim(t, c, "acme", "k-r", "hook-r")
	id := claims.ID{Tenant: "acme", Source: "s", Key: "k-r"}
	if err := e.store.Release(ctx, id, "hook-r", rep.Revision); err != nil {
		t.Fatal(err)
	}
	if err := c.Settle(ctx, settleOf(r, rep.Revision)); !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("settle of a released claim: %v, want protocol.ErrClaimLost", err)
	}
	if st := claimState(t, e.store, r); st.State != protocol.StateAbsent {
		t.Fatalf("after the settle: %+v", st)
	}
}

// stuckSync is a ThenSyncer whose rounds never end (a stuck disk): Sync
// waits for its context, Then keeps the callback.
type stuckSync struct {
	thens atomic.Int64
}

func (s *stuckSync) Sync(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s *stuckSync) Then(func(error)) func() { s.thens.Add(1); return func() {} }

// A frame's settles waiting on a round that never ends are answered
// unavailable at their deadline, and the worker still stops: the callback
// does not hold the jobs past it.
func TestSettleDeadlineWithAStuckSync(t *testing.T) {
	t.Parallel()
	st := &stuckSync{}
	k, e, w, c := single(t, WithSync(st))
	_, rep := hitClaim(t, c, "acme", "k-1", "hook-1")
	// The settle as a frame of its own with a 200 ms deadline, its answer
	// read from the owner's reply (not the client's own timer).
	n := quota.Partition("acme", protocol.DefaultPartitions)
	b := frame.AppendRequestHeader(nil, 1)
	b = frame.AppendSettle(b, n, 200, "acme", "s", "k-1", "hook-1", rep.Revision, 0)
	a := frameAnswers(t, k.Conn, quota.PartitionSubject(e.prefix, n), b)[0]
	if a.Status != frame.StatusUnavailable || !strings.Contains(string(a.Reason), "waiting for the store's sync") {
		t.Fatalf("settle on a stuck sync: %+v (reason %q), want unavailable waiting for the sync", a, a.Reason)
	}
	if st.thens.Load() != 1 {
		t.Fatalf("%d callbacks asked, want 1 (the pipelined settle)", st.thens.Load())
	}
	stop, cancelStop := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelStop()
	if err := w.Stop(stop); err != nil {
		t.Fatalf("stop with a settle's round stuck: %v", err)
	}
}

// slowSync is a disk whose every sync takes d (or until ctx ends).
type slowSync struct{ d time.Duration }

func (s slowSync) Sync(ctx context.Context) error {
	select {
	case <-time.After(s.d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A settle without a deadline waits as long as claims.settle does
// (protocol.DefaultSettleTimeout), not the hits' 250 ms budget: a sync slower
// than the hits' budget still answers ok.
func TestSettleBudget(t *testing.T) {
	t.Parallel()
	_, _, _, c := single(t, WithSync(slowSync{d: 2 * protocol.DefaultTimeout}))
	if c.Budget() != protocol.DefaultTimeout {
		t.Fatalf("the client's budget is %s, want the default %s", c.Budget(), protocol.DefaultTimeout)
	}
	r, rep := hitClaim(t, c, "acme", "k-1", "hook-1")
	if err := c.Settle(context.Background(), settleOf(r, rep.Revision)); err != nil {
		t.Fatalf("a settle on a %s sync: %v", 2*protocol.DefaultTimeout, err)
	}
}
