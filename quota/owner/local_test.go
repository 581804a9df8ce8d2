package owner

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// pathEnv is one fleet of one worker, its claims store and a client that
// reaches the worker one way: in process (quota.WithLocalOwner) or over NATS.
type pathEnv struct {
	env    *fleetEnv
	w      *Worker
	store  *claims.KV
	c      *quota.Router
	wire   atomic.Int64 // owner requests seen on the fleet's quota subjects
	leases *kvstore.Bucket
}

// newPathEnv starts a fleet on k whose worker and claims store read clock;
// local: the client decides in process. failing: the worker's claim
// store fails every Claim with protocol.ErrUnavailable.
func newPathEnv(t *testing.T, k *testkit.Kit, clock func() time.Time, local, failing bool) *pathEnv {
	t.Helper()
	e := newFleetEnv(t, 0, func(t testing.TB, cfg kvstore.BucketConfig) *kvstore.Bucket { return k.Bucket(t, cfg) })
	store, err := claims.NewKV(e.claims, claims.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	var ws claims.Store = store
	if failing {
		ws = failingStore{Store: store, err: protocol.ErrUnavailable}
	}
	w := e.newWorker(t, k.Conn, ws, quota.WithClock(clock))
	waitServed(t, 10*time.Second, w)
	p := &pathEnv{env: e, w: w, store: store, leases: e.leases}
	sub, err := k.Conn.Subscribe(e.prefix+".v1.quota.>", func(*nats.Msg) { p.wire.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	opts := []quota.RouterOption{quota.WithBudget(300 * time.Millisecond)}
	if local {
		opts = append(opts, quota.WithLocalOwner(w))
	}
	p.c = e.client(t, k.Conn, opts...)
	return p
}

// TestLocalOwnerAnswersAsNATS runs the same hits through a client that
// reaches its owner in process and one that reaches an identical owner over
// NATS, and compares every answer: results, retry-after, limits, hook ids,
// revisions, claim outcomes, errors, and not_owner after a lost lease.
func TestLocalOwnerAnswersAsNATS(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	start := time.Now() // a claim's expiry comes from the server's time stamp
	var now atomic.Int64
	now.Store(start.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	advance := func(d time.Duration) { now.Add(int64(d)) }

	local, remote := newPathEnv(t, k, clock, true, false), newPathEnv(t, k, clock, false, false)
	ctx := testkit.Context(t)
	claimOf := func(tenant, key, hookID string) *protocol.ClaimRequest {
		return &protocol.ClaimRequest{Tenant: tenant, Source: "gh", Key: key, HookID: hookID, PendingTTLMs: 30_000}
	}
	claim := func(key, hookID string) *protocol.ClaimRequest { return claimOf("acme", key, hookID) }
	bytes := func(tenant string, n int64) protocol.Charge {
		return protocol.Charge{Kind: protocol.KindBytes, Tenant: tenant, IncrementUs: 10 * n, CapacityUs: 10_000}
	}
	type step struct {
		name   string
		req    protocol.HitRequest
		settle bool          // after the hit: settle its claim (commit) in its store
		wait   time.Duration // before the hit: advance the clock
	}
	steps := []step{
		{name: "ok", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3)}}},
		{name: "two charges", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3), bytes("acme", 400)}}},
		{name: "claim ok", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3)}, Claim: claim("d1", "h1")}},
		{name: "rate limited", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3)}}},
		{name: "rate limited with claim", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3), bytes("acme", 1)}, Claim: claim("d2", "h2")}},
		{name: "claim ok (beta)", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("beta", 5)}, Claim: claimOf("beta", "d1", "h3")}},
		{name: "pending", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("beta", 5)}, Claim: claimOf("beta", "d1", "h4")}, wait: 1500 * time.Millisecond},
		{name: "claim only, ok then settled", req: protocol.HitRequest{Claim: claimOf("beta", "d3", "h5")}, settle: true},
		{name: "duplicate", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("beta", 5)}, Claim: claimOf("beta", "d3", "h6")}},
		{name: "invalid: increment over capacity", req: protocol.HitRequest{Charges: []protocol.Charge{bytes("gamma", 2000)}}},
		{name: "bytes refill", req: protocol.HitRequest{Charges: []protocol.Charge{bytes("gamma", 500)}}, wait: 5 * time.Millisecond},
		{name: "other tenant", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("delta", 1)}, Claim: &protocol.ClaimRequest{Tenant: "delta", Source: "s", Key: "k", HookID: "x"}}},
		{name: "other tenant limited", req: protocol.HitRequest{Charges: []protocol.Charge{hooks("delta", 1)}}},
	}
	for _, s := range steps {
		advance(s.wait)
		var reps [2]protocol.HitReply
		var errs [2]error
		for i, p := range []*pathEnv{local, remote} {
			reps[i], errs[i] = p.c.Hit(ctx, s.req)
			if s.settle && errs[i] == nil {
				// The client's settle: in process (SettleLocal) or in a
				// frame; a second one of the same claim is lost either way.
				cl := s.req.Claim
				r := protocol.SettleRequest{Tenant: cl.Tenant, Source: cl.Source, Key: cl.Key, HookID: cl.HookID, Revision: reps[i].Revision, TTLMs: time.Hour.Milliseconds()}
				if err := p.c.Settle(ctx, r); err != nil {
					t.Fatalf("%s: path %d: settle: %v", s.name, i, err)
				}
				if err := p.c.Settle(ctx, r); !errors.Is(err, protocol.ErrClaimLost) {
					t.Fatalf("%s: path %d: settle again: %v, want protocol.ErrClaimLost", s.name, i, err)
				}
			}
		}
		if reps[0].Result == protocol.ResultPending {
			// Each fleet's claim was created at its own server time: each
			// path must say what its own store says, then they compare.
			for i, p := range []*pathEnv{local, remote} {
				cl := s.req.Claim
				st, err := p.store.Get(ctx, claims.ID{Tenant: cl.Tenant, Source: cl.Source, Key: cl.Key})
				if want := max(1, timeconv.CeilMs(st.ExpiresIn)); err != nil || reps[i].RetryAfterMs != want {
					t.Errorf("%s: path %d: retry after %d ms, its store says %d (%v)", s.name, i, reps[i].RetryAfterMs, want, err)
				}
				reps[i].RetryAfterMs = 0
			}
		}
		if fmt.Sprint(errs[0]) != fmt.Sprint(errs[1]) || !reflect.DeepEqual(reps[0], reps[1]) {
			t.Errorf("%s:\n in process %+v %v\n over NATS  %+v %v", s.name, reps[0], errs[0], reps[1], errs[1])
		}
		t.Logf("%s: %+v %v", s.name, reps[0], errs[0])
	}
	if n := local.wire.Load(); n != 0 {
		t.Errorf("the in-process path sent %d owner requests over NATS", n)
	}
	if remote.wire.Load() == 0 {
		t.Error("the NATS path sent nothing: the comparison compared nothing")
	}

	// A claim store that fails: unavailable the same way, and refunded.
	flocal, fremote := newPathEnv(t, k, clock, true, true), newPathEnv(t, k, clock, false, true)
	for _, req := range []protocol.HitRequest{
		{Charges: []protocol.Charge{hooks("acme", 1)}, Claim: claim("f", "h")},
		{Charges: []protocol.Charge{hooks("acme", 1)}},
	} {
		rl, errl := flocal.c.Hit(ctx, req)
		rr, errr := fremote.c.Hit(ctx, req)
		if !reflect.DeepEqual(rl, rr) || strings.ReplaceAll(fmt.Sprint(errl), flocal.env.prefix, "P") != strings.ReplaceAll(fmt.Sprint(errr), fremote.env.prefix, "P") {
			t.Errorf("failing store:\n in process %+v %v\n over NATS  %+v %v", rl, errl, rr, errr)
		}
	}

	// A lost lease: another holder takes acme's partition in both fleets;
	// the in-process path sees it as the NATS path does (not served, no
	// responders, retried until the deadline: unavailable), and spends
	// nothing.
	n := quota.Partition("acme", protocol.DefaultPartitions)
	for _, p := range []*pathEnv{local, remote} {
		if _, err := p.leases.Put(ctx, fmt.Sprintf("lease.%d", n), []byte(`{"owner":"intruder"}`), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*pathEnv{local, remote} {
		testkit.Eventually(t, 5*time.Second, func() bool { return ownerOf(n, p.w) < 0 }, "the lease is lost")
	}
	wire := local.wire.Load()
	for i, p := range []*pathEnv{local, remote} {
		_, err := p.c.Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3)}, Claim: claim("d9", "h9")}) // the client's budget
		if !errors.Is(err, protocol.ErrUnavailable) {
			t.Errorf("path %d after a lost lease: %v, want ErrUnavailable", i, err)
		}
		st, err := p.store.Get(ctx, claims.ID{Tenant: "acme", Source: "gh", Key: "d9"})
		if err != nil || st.State != protocol.StateAbsent {
			t.Errorf("path %d: a hit of a lost partition wrote a claim: %+v %v", i, st, err)
		}
	}
	if local.wire.Load() == wire {
		t.Error("the in-process client did not go to the partition subject after its lease was lost")
	}
}
