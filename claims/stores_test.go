package claims_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is a fixed start, not on a whole second, to catch truncation bugs.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC)

// newFakeClock is a clock at t0 that moves only when told to.
func newFakeClock() *testkit.Clock { return testkit.NewClock(t0) }

var bucketSeq atomic.Int64

// bucketName gives every subtest its own bucket on a shared server.
func bucketName(stem string) string { return fmt.Sprintf("%s_%d", stem, bucketSeq.Add(1)) }

func noElapse(time.Duration) {}

// kvClaims is the setup of the KV store's own tests: a server of its
// own, a bucket "claims" on it, the store on the bucket and a context
// ending with the test.
func kvClaims(t *testing.T) (context.Context, *kvstore.Bucket, *claims.KV) {
	t.Helper()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	b := k.Bucket(t, kvstore.BucketConfig{Name: "claims"})
	return ctx, b, newKV(t, b)
}

// newKV, newKVReplay and newMemory construct a store, failing the test on
// an error.
func newKV(t testing.TB, b *kvstore.Bucket, opts ...claims.KVOption) *claims.KV {
	t.Helper()
	return testkit.Must(claims.NewKV(b, opts...))(t)
}

func newKVReplay(t testing.TB, b *kvstore.Bucket, opts ...claims.KVReplayOption) *claims.KVReplay {
	t.Helper()
	return testkit.Must(claims.NewKVReplay(b, opts...))(t)
}

func newMemory(t testing.TB, opts ...claims.MemOption) *claims.Memory {
	t.Helper()
	return testkit.Must(claims.NewMemory(opts...))(t)
}

func TestKVStore(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	runStoreSuite(t, func(t *testing.T) storeFixture {
		b := k.Bucket(t, kvstore.BucketConfig{Name: bucketName("claims")})
		return storeFixture{store: newKV(t, b), elapse: noElapse}
	})
}

// TestKVStoreNoMarkers runs the suite on the default claims bucket: per-key
// TTLs without expiry markers (no --claim-expiry-events).
func TestKVStoreNoMarkers(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	runStoreSuite(t, func(t *testing.T) storeFixture {
		b := k.Bucket(t, claims.BucketConfig(bucketName("claims_nomark"), 1))
		return storeFixture{store: newKV(t, b), elapse: noElapse}
	})
}

func TestMemoryStore(t *testing.T) {
	t.Parallel()
	runStoreSuite(t, func(t *testing.T) storeFixture {
		c := newFakeClock()
		return storeFixture{store: newMemory(t, claims.WithClock(c.Now)), elapse: c.Advance}
	})
}

func TestKVReplay(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	runReplaySuite(t, func(t *testing.T, capacity int) replayFixture {
		b := k.Bucket(t, claims.ReplayBucketConfig(bucketName("replay"), int64(capacity), 1))
		return replayFixture{store: newKVReplay(t, b), now: time.Now, elapse: noElapse}
	})
}

func TestMemoryReplay(t *testing.T) {
	t.Parallel()
	runReplaySuite(t, func(t *testing.T, capacity int) replayFixture {
		c := newFakeClock()
		r := testkit.Must(claims.NewMemoryReplay(claims.WithReplayCapacity(capacity), claims.WithClock(c.Now)))(t)
		elapse := func(d time.Duration) {
			c.Advance(d)
			if _, err := r.Sweep(c.Now().Unix()); err != nil {
				t.Fatal(err)
			}
		}
		return replayFixture{store: r, now: c.Now, elapse: elapse}
	})
}

// TestKVReplicated runs both suites on R3 buckets of a 3-node cluster,
// each subtest talking through another node: a direct get there may come
// from a replica that lags behind the write it was just told about.
func TestKVReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: starts a 3-node cluster")
	}
	t.Parallel()
	cl := testkit.Cluster(t, 3)
	var node atomic.Int64
	next := func() int { return int(node.Add(1) % 3) }
	t.Run("Store", func(t *testing.T) {
		t.Parallel()
		runStoreSuite(t, func(t *testing.T) storeFixture {
			b := cl.Bucket(t, next(), kvstore.BucketConfig{Name: bucketName("claims"), Replicas: 3})
			return storeFixture{store: newKV(t, b), elapse: noElapse}
		})
	})
	t.Run("StoreSettleOwn", func(t *testing.T) {
		t.Parallel()
		var own atomic.Int64
		wantAtLeast(t, &own, 10, "settles took SettleOwn")
		runStoreSuite(t, func(t *testing.T) storeFixture {
			// The default claims bucket: no expiry markers.
			b := cl.Bucket(t, next(), claims.BucketConfig(bucketName("claims_own"), 3))
			return storeFixture{store: newOwnSettling(newKV(t, b), &own), elapse: noElapse}
		})
	})
	t.Run("StartClaimBatch", func(t *testing.T) {
		t.Parallel()
		testStartClaimBatch(t, newKV(t, cl.Bucket(t, next(), claims.BucketConfig(bucketName("claims_batch"), 3))))
	})
	t.Run("SettleRightAfterClaim", func(t *testing.T) {
		t.Parallel()
		testSettleRightAfterClaim(t, cl, (*claims.KV).Settle)
	})
	t.Run("SettleOwnRightAfterClaim", func(t *testing.T) {
		t.Parallel()
		testSettleRightAfterClaim(t, cl, func(s *claims.KV, ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
			return s.SettleOwn(ctx, id, hookID, "", rev, ttl)
		})
	})
	t.Run("Replay", func(t *testing.T) {
		t.Parallel()
		runReplaySuite(t, func(t *testing.T, capacity int) replayFixture {
			b := cl.Bucket(t, next(), claims.ReplayBucketConfig(bucketName("replay"), int64(capacity), 3))
			return replayFixture{store: newKVReplay(t, b), now: time.Now, elapse: noElapse}
		})
	})
}

// testSettleRightAfterClaim settles each claim the moment it is made,
// through every node at once. A direct get may be answered by a replica
// that has not applied the claim yet; without the leader read that
// follows such a miss, a few percent of these settles came back protocol.ErrClaimLost.
// A settle can also reach the leader before it stops counting the claim's
// create in flight (it acks first): refused undecided (10164), it is sent
// again by kvstore, never taken for a conflict (once 1 of 1,920 was).
// SettleOwn reads nothing before its write (which the leader decides), so
// it must never fail here either.
func testSettleRightAfterClaim(t *testing.T, cl *testkit.ClusterKit,
	settle func(*claims.KV, context.Context, claims.ID, string, uint64, time.Duration) error) {
	ctx := testkit.Context(t)
	cfg := kvstore.BucketConfig{Name: bucketName("lag"), Replicas: 3}
	cl.Bucket(t, 0, cfg)
	const goroutines, pairs = 16, 40 // per node
	var lost atomic.Int64
	var wg sync.WaitGroup
	for node := range 3 {
		s := newKV(t, cl.Bucket(t, node, cfg))
		for g := range goroutines {
			wg.Go(func() {
				for i := range pairs {
					cid := id("t", "s", fmt.Sprintf("%d-%d-%d", node, g, i))
					r, err := s.Claim(ctx, cid, "h", time.Minute)
					if err != nil {
						t.Errorf("claim %s: %v", cid.Key, err)
						return
					}
					if err := settle(s, ctx, cid, "h", r.Revision, time.Hour); err != nil {
						if lost.Add(1) <= 3 {
							t.Logf("settle %s (revision %d): %v", cid.Key, r.Revision, err)
						}
					}
				}
			})
		}
	}
	wg.Wait()
	if n := lost.Load(); n > 0 {
		t.Errorf("%d of %d settles right after their claim failed", n, 3*goroutines*pairs)
	}
}

// ownSettling is a Store whose Settle takes the one-write path
// (claims.Store.SettleOwn) whenever its caller is honest the way the edge is:
// the revision is that of an OK Claim it made for the same hook id. Other
// settles (another hook id, a revision read back with Get) go through the
// inner Settle. Running the conformance suite on it holds SettleOwn to
// every assertion an honest caller can meet.
type ownSettling struct {
	claims.Store
	mu    sync.Mutex
	taken map[ownClaim]bool
	own   *atomic.Int64 // settles that took the one-write path
}

type ownClaim struct {
	key, hookID string
	rev         uint64
}

func newOwnSettling(inner claims.Store, own *atomic.Int64) *ownSettling {
	return &ownSettling{Store: inner, taken: map[ownClaim]bool{}, own: own}
}

func (s *ownSettling) Claim(ctx context.Context, id claims.ID, hookID string, ttl time.Duration) (claims.Result, error) {
	r, err := s.Store.Claim(ctx, id, hookID, ttl)
	if err == nil && r.Outcome == claims.OK {
		s.mu.Lock()
		s.taken[ownClaim{claims.KVKey(id), hookID, r.Revision}] = true
		s.mu.Unlock()
	}
	return r, err
}

func (s *ownSettling) Settle(ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
	s.mu.Lock()
	mine := id.Validate() == nil && s.taken[ownClaim{claims.KVKey(id), hookID, rev}]
	s.mu.Unlock()
	if !mine {
		return s.Store.Settle(ctx, id, hookID, rev, ttl)
	}
	s.own.Add(1)
	return s.Store.SettleOwn(ctx, id, hookID, "", rev, ttl)
}

// SettleOwn is a settle of the caller's own claim (the edge's): the
// one-write path.
func (s *ownSettling) SettleOwn(ctx context.Context, id claims.ID, hookID, digest string, rev uint64, ttl time.Duration) error {
	s.own.Add(1)
	return s.Store.SettleOwn(ctx, id, hookID, digest, rev, ttl)
}

// wantAtLeast fails t at its end unless counter reached min (so a suite
// cannot pass without exercising the path counter counts).
func wantAtLeast(t *testing.T, counter *atomic.Int64, min int64, what string) {
	t.Cleanup(func() {
		if n := counter.Load(); n < min {
			t.Errorf("%d %s, want at least %d", n, what, min)
		}
	})
}

// runWrappedKVSuite runs the Store suite on wrap(a KV store on the
// default claims bucket, a counter), and fails unless the path the
// counter counts (what) was taken at least 10 times.
func runWrappedKVSuite(t *testing.T, what string, wrap func(*claims.KV, *atomic.Int64) claims.Store) {
	t.Parallel()
	k := testkit.New(t)
	var n atomic.Int64
	wantAtLeast(t, &n, 10, what)
	runStoreSuite(t, func(t *testing.T) storeFixture {
		// The default claims bucket (no expiry markers), as the edge runs it.
		b := k.Bucket(t, claims.BucketConfig(bucketName("claims_wrapped"), 0))
		return storeFixture{store: wrap(newKV(t, b), &n), elapse: noElapse}
	})
}

func TestKVStoreSettleOwn(t *testing.T) {
	runWrappedKVSuite(t, "settles took SettleOwn", func(s *claims.KV, n *atomic.Int64) claims.Store { return newOwnSettling(s, n) })
}

func TestMemoryStoreSettleOwn(t *testing.T) {
	t.Parallel()
	var own atomic.Int64
	wantAtLeast(t, &own, 10, "settles took SettleOwn")
	runStoreSuite(t, func(t *testing.T) storeFixture {
		c := newFakeClock()
		return storeFixture{store: newOwnSettling(newMemory(t, claims.WithClock(c.Now)), &own), elapse: c.Advance}
	})
}

// TestKVSettleOwnRefused checks what the read after a refused write says:
// a second settle of the same claim is protocol.ErrClaimLost "already settled", a
// settle of a claim another hook took over is protocol.ErrClaimLost without it.
func TestKVSettleOwnRefused(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	s := newKV(t, k.Bucket(t, kvstore.BucketConfig{Name: bucketName("claims_refused")}))
	a := id("acme", "gh", "again")
	r := claim(t, s, a, "h1", time.Minute)
	if err := s.SettleOwn(ctx, a, "h1", "", r.Revision, hour); err != nil {
		t.Fatal(err)
	}
	err := s.SettleOwn(ctx, a, "h1", "", r.Revision, hour)
	if !errors.Is(err, protocol.ErrClaimLost) || !strings.Contains(err.Error(), "already settled") {
		t.Fatalf("second SettleOwn: %v, want ErrLost (already settled)", err)
	}
	b := id("acme", "gh", "taken-over")
	r1 := claim(t, s, b, "h1", time.Minute)
	if err := s.Release(ctx, b, "h1", r1.Revision); err != nil {
		t.Fatal(err)
	}
	r2 := claim(t, s, b, "h2", time.Minute)
	if err := s.Settle(ctx, b, "h2", r2.Revision, hour); err != nil {
		t.Fatal(err)
	}
	err = s.SettleOwn(ctx, b, "h1", "", r1.Revision, hour)
	if !errors.Is(err, protocol.ErrClaimLost) || strings.Contains(err.Error(), "already settled") {
		t.Fatalf("SettleOwn of a claim taken over: %v, want ErrLost (not settled by us)", err)
	}
	wantState(t, get(t, s, b), protocol.StateCommitted, "h2", 0)
}

// claimMany takes reqs as an owner takes a frame's claims: every create
// started (StartClaim) before any is waited for, and a claim not done by
// its started create (refused, or never started) taken with Claim.
func claimMany(ctx context.Context, s claims.Store, reqs []claimReq) []claimOut {
	out := make([]claimOut, len(reqs))
	started := make([]claims.StartedClaim, len(reqs))
	for i, r := range reqs {
		c, err := s.StartClaim(r.id, r.hookID, r.ttl)
		if err != nil {
			out[i].err = err
			continue
		}
		started[i] = c
	}
	for i, c := range started {
		if c == nil {
			if !errors.Is(out[i].err, protocol.ErrInvalid) {
				out[i].res, out[i].err = s.Claim(ctx, reqs[i].id, reqs[i].hookID, reqs[i].ttl)
			}
			continue
		}
		res, done, err := c.Wait(ctx)
		if !done {
			res, err = s.Claim(ctx, reqs[i].id, reqs[i].hookID, reqs[i].ttl)
		}
		out[i] = claimOut{res, err}
	}
	return out
}

type claimReq struct {
	id     claims.ID
	hookID string
	ttl    time.Duration
}

type claimOut struct {
	res claims.Result
	err error
}

// claimingStarted is a KV store whose Claim goes through a started claim
// (a batch of one): the conformance suite holds the pipelined path to
// Claim's answers.
type claimingStarted struct {
	*claims.KV
	calls *atomic.Int64
}

func (s claimingStarted) Claim(ctx context.Context, id claims.ID, hookID string, ttl time.Duration) (claims.Result, error) {
	s.calls.Add(1)
	if ctx.Err() != nil {
		// StartClaim takes no context: a caller whose context is done
		// starts nothing (as Claim sends nothing then). Started anyway, the
		// write lands, and Wait reports an ack that beat its context's end
		// (kvstore's "resolved meanwhile"): a claim made, not a failure.
		return s.KV.Claim(ctx, id, hookID, ttl)
	}
	out := claimMany(ctx, s.KV, []claimReq{{id, hookID, ttl}})
	return out[0].res, out[0].err
}

func TestKVStoreStartClaim(t *testing.T) {
	runWrappedKVSuite(t, "claims took StartClaim", func(s *claims.KV, n *atomic.Int64) claims.Store { return claimingStarted{KV: s, calls: n} })
}

// testStartClaimBatch starts one batch of every kind of claim at once —
// new keys, a committed key, another hook's pending key, the caller's own
// pending key, two hooks racing for one new key, invalid requests — and
// checks each answer is Claim's.
func testStartClaimBatch(t *testing.T, s claims.Store) {
	ctx := testkit.Context(t)
	committed, pending, mine := id("acme", "gh", "committed"), id("acme", "gh", "pending"), id("acme", "gh", "mine")
	rc := claim(t, s, committed, "h0", time.Minute)
	if err := s.Settle(ctx, committed, "h0", rc.Revision, hour); err != nil {
		t.Fatal(err)
	}
	claim(t, s, pending, "h0", time.Minute)
	rm := claim(t, s, mine, "h1", time.Minute)
	race := id("acme", "gh", "race")
	reqs := []claimReq{
		{id("acme", "gh", "new-1"), "h1", time.Minute},
		{id("globex", "gh", "new-2"), "h2", time.Minute},
		{committed, "h3", time.Minute},
		{pending, "h4", time.Minute},
		{mine, "h1", time.Minute},
		{race, "hA", time.Minute},
		{race, "hB", time.Minute},
		{claims.ID{Source: "gh", Key: "k"}, "h5", time.Minute},
		{id("acme", "gh", "bad-ttl"), "h6", -time.Second},
	}
	out := claimMany(ctx, s, reqs)
	for i, o := range out[:7] {
		if o.err != nil {
			t.Fatalf("request %d: %v", i, o.err)
		}
	}
	wantOutcome(t, out[0].res, claims.OK, "h1")
	wantOutcome(t, out[1].res, claims.OK, "h2")
	wantOutcome(t, out[2].res, claims.Duplicate, "h0")
	wantOutcome(t, out[3].res, claims.Pending, "h0")
	wantOutcome(t, out[4].res, claims.OK, "h1")
	if out[4].res.Revision != rm.Revision {
		t.Fatalf("own pending claim: revision %d, want %d", out[4].res.Revision, rm.Revision)
	}
	a, b := out[5].res, out[6].res
	if a.Outcome == claims.Pending {
		a, b = b, a
	}
	if a.Outcome != claims.OK || b.Outcome != claims.Pending || b.HookID != a.HookID {
		t.Fatalf("racing pair: %+v and %+v, want one OK and the other pending on it", out[5].res, out[6].res)
	}
	for i, o := range out[7:] {
		if !errors.Is(o.err, protocol.ErrInvalid) {
			t.Fatalf("invalid request %d: %v, want ErrInvalid", 7+i, o.err)
		}
	}
	for i, r := range reqs[:2] {
		wantState(t, get(t, s, r.id), protocol.StatePending, r.hookID, out[i].res.Revision)
	}
}

func TestKVStartClaimBatch(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	testStartClaimBatch(t, newKV(t, k.Bucket(t, claims.BucketConfig(bucketName("claims_batch"), 0))))
}

func TestMemoryStartClaimBatch(t *testing.T) {
	t.Parallel()
	testStartClaimBatch(t, newMemory(t))
}
