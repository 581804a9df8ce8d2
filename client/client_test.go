package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/service"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/ownerkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ---- fixtures ----

const (
	testPartitions = 8
	replayCapacity = 3
)

// env is the real sluice service on an embedded server — the real quota
// Worker and quota Router, the KV claims, replay and cooldown stores —
// and a client.Client on a connection of its own, as another service
// would have.
type env struct {
	kit    *testkit.Kit
	svc    *service.Service
	claims *claims.KV
	quota  *quota.Router // the service's, the owner's settle
	nc     *nats.Conn    // the client's connection
	c      *client.Client
}

// start runs the service (mutate may change its config) and returns a
// client built with opts.
func start(t *testing.T, mutate func(*service.Config), opts ...client.Option) *env {
	t.Helper()
	kit := testkit.New(t)
	names := kvstore.BucketNames(protocol.DefaultPrefix)
	cs, err := claims.NewKV(kit.Bucket(t, kvstore.BucketConfig{Name: names.Claims}))
	if err != nil {
		t.Fatal(err)
	}

	w, qc := ownerkit.Serving(t, kit, cs, testPartitions, owner.WithLeaseTTL(2*time.Second))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("worker stop: %v", err)
		}
	})

	rs, err := claims.NewKVReplay(kit.Bucket(t, claims.ReplayBucketConfig(names.Replay, replayCapacity, 1)))
	if err != nil {
		t.Fatal(err)
	}
	cd, err := cooldown.New(kit.Bucket(t, cooldown.BucketConfig(protocol.DefaultPrefix, 1)))
	if err != nil {
		t.Fatal(err)
	}
	cfg := service.Config{
		Quota:    qc,
		Claims:   cs,
		Replay:   rs,
		Cooldown: cd,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	svc, err := service.New(kit.Conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() }) // a test may have stopped it already

	nc, err := kit.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &env{kit: kit, svc: svc, claims: cs, quota: qc, nc: nc, c: c}
}

// hookCharge is a "hooks" charge of tenant with the given burst, at a rate so
// slow (1/h) that nothing refills during a test.
func hookCharge(tenant string, burst int64) protocol.Charge {
	inc := int64(time.Hour / time.Microsecond)
	return protocol.Charge{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: inc, CapacityUs: inc * burst}
}

// claimHit is a one-charge hit that claims (acme, gh, key) for hookID.
func claimHit(key, hookID string) protocol.HitRequest {
	return protocol.HitRequest{
		Charges: []protocol.Charge{hookCharge("acme", 100)},
		Claim: &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: key, HookID: hookID,
			TTLMs: time.Minute.Milliseconds(), PendingTTLMs: 30 * time.Second.Milliseconds()},
	}
}

func ctxT(t *testing.T) context.Context { return testkit.Context(t) }

// mustHit sends a hit that must succeed with result want.
func mustHit(t *testing.T, c *client.Client, req protocol.HitRequest, want string) protocol.HitReply {
	t.Helper()
	rep, err := c.Hit(ctxT(t), req)
	if err != nil {
		t.Fatalf("hit: %v", err)
	}
	if rep.Result != want {
		t.Fatalf("hit: result %q, want %q (%+v)", rep.Result, want, rep)
	}
	return rep
}

// wantServiceError checks that err wraps sentinel and a *ServiceError with
// code whose reason contains reason.
func wantServiceError(t *testing.T, err, sentinel error, code int, reason string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("want %v, got %v", sentinel, err)
	}
	var se *client.ServiceError
	if !errors.As(err, &se) {
		t.Fatalf("no *ServiceError in %v", err)
	}
	if se.Code != code || !strings.Contains(se.Reason, reason) {
		t.Fatalf("service error %d %q, want %d …%s…", se.Code, se.Reason, code, reason)
	}
}

// ---- construction ----

func TestNew(t *testing.T) {
	kit := testkit.New(t)
	c, err := client.New(kit.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix() != "sluice" || c.Timeout() != protocol.DefaultTimeout || c.SettleTimeout() != protocol.DefaultSettleTimeout {
		t.Fatalf("defaults: prefix %q timeout %v settle %v", c.Prefix(), c.Timeout(), c.SettleTimeout())
	}
	c, err = client.New(kit.Conn, client.WithPrefix("acme.sl"), client.WithTimeout(2*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The settle timeout is never below the timeout.
	if c.Prefix() != "acme.sl" || c.Timeout() != 2*time.Second || c.SettleTimeout() != 2*time.Second {
		t.Fatalf("options: prefix %q timeout %v settle %v", c.Prefix(), c.Timeout(), c.SettleTimeout())
	}
	if _, err := client.New(nil); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Fatalf("nil conn: %v", err)
	}
	for name, opt := range map[string]client.Option{
		"empty prefix":            client.WithPrefix(""),
		"prefix with wildcard":    client.WithPrefix("a.>"),
		"prefix with space":       client.WithPrefix("a b"),
		"prefix empty token":      client.WithPrefix("a..b"),
		"zero timeout":            client.WithTimeout(0),
		"negative timeout":        client.WithTimeout(-time.Second),
		"zero settle timeout":     client.WithSettleTimeout(0),
		"negative settle timeout": client.WithSettleTimeout(-1),
	} {
		if _, err := client.New(kit.Conn, opt); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("%s: want errInvalidOption, got %v", name, err)
		}
	}
}

// ---- quota.* and claims.* ----

// TestHitSettle drives the two-phase claim through the service: ok
// (pending), pending for another hook, settle, duplicate, a stale settle
// (claim lost), get at every step.
func TestHitSettle(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)

	st, err := e.c.GetClaim(ctx, "acme", "gh", "d-1")
	if err != nil || st.State != protocol.StateAbsent || st.HookID != "" || st.Revision != 0 || st.ExpiresIn() != 0 {
		t.Fatalf("before: %+v %v", st, err)
	}

	rep := mustHit(t, e.c, claimHit("d-1", "h1"), protocol.ResultOK)
	if rep.HookID != "h1" || rep.Revision == 0 || rep.RetryAfterMs != 0 || rep.Fallback {
		t.Fatalf("ok: %+v", rep)
	}
	if len(rep.Limits) != 1 || rep.Limits[0].Kind != protocol.KindHooks || rep.Limits[0].Remaining != 99 {
		t.Fatalf("limits: %+v", rep.Limits)
	}
	st, err = e.c.GetClaim(ctx, "acme", "gh", "d-1")
	if err != nil || st.State != protocol.StatePending || st.HookID != "h1" || st.Revision != rep.Revision ||
		st.ExpiresIn() <= 0 || st.ExpiresIn() > 30*time.Second {
		t.Fatalf("pending: %+v %v", st, err)
	}

	// Another hook on the same key while h1 works: pending, with the wait.
	p := mustHit(t, e.c, claimHit("d-1", "h2"), protocol.ResultPending)
	if p.HookID != "h1" || p.RetryAfterMs < 1 {
		t.Fatalf("pending: %+v", p)
	}

	// Another hook id cannot settle h1's claim.
	wantServiceError(t, e.c.Settle(ctx, "acme", "gh", "d-1", "h2", rep.Revision), client.ErrClaimLost, 409, "claim_lost")

	if err := e.c.Settle(ctx, "acme", "gh", "d-1", "h1", rep.Revision); err != nil {
		t.Fatalf("settle: %v", err)
	}
	st, err = e.c.GetClaim(ctx, "acme", "gh", "d-1")
	// Kept for the service's --dedupe-ttl (72 h by default).
	if err != nil || st.State != protocol.StateCommitted || st.HookID != "h1" || st.ExpiresIn() < 71*time.Hour {
		t.Fatalf("committed: %+v %v", st, err)
	}

	d := mustHit(t, e.c, claimHit("d-1", "h3"), protocol.ResultDuplicate)
	if d.HookID != "h1" {
		t.Fatalf("duplicate names %q, want the original h1", d.HookID)
	}

	// A second settle with the pending revision: the claim is lost — the
	// package's sentinel and protocol.ErrClaimLost both.
	err = e.c.Settle(ctx, "acme", "gh", "d-1", "h1", rep.Revision)
	wantServiceError(t, err, client.ErrClaimLost, 409, protocol.ClaimLost.Code)
	if !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("stale settle is not protocol.ErrClaimLost: %v", err)
	}
	if errors.Is(err, client.ErrInvalid) || errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("stale settle wraps another sentinel too: %v", err)
	}
}

// TestSettleTTL: the ttl_ms extension sets how long the committed claim is
// kept.
func TestSettleTTL(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	rep := mustHit(t, e.c, claimHit("ttl", "h1"), protocol.ResultOK)
	if err := e.c.SettleTTL(ctx, "acme", "gh", "ttl", "h1", rep.Revision, 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	st, err := e.c.GetClaim(ctx, "acme", "gh", "ttl")
	// 1.5 s rounds up to 2 s in the store.
	if err != nil || st.State != protocol.StateCommitted || st.ExpiresIn() > 2*time.Second {
		t.Fatalf("committed with ttl: %+v %v", st, err)
	}
	if err := e.c.SettleTTL(ctx, "acme", "gh", "ttl", "h1", rep.Revision, -time.Second); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("negative ttl: %v", err)
	}
}

func TestReleaseClaim(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	rep := mustHit(t, e.c, claimHit("r-1", "h1"), protocol.ResultOK)
	if err := e.c.ReleaseClaim(ctx, "acme", "gh", "r-1", "h1", rep.Revision); err != nil {
		t.Fatalf("release: %v", err)
	}
	if st, err := e.c.GetClaim(ctx, "acme", "gh", "r-1"); err != nil || st.State != protocol.StateAbsent {
		t.Fatalf("after release: %+v %v", st, err)
	}
	err := e.c.ReleaseClaim(ctx, "acme", "gh", "r-1", "h1", rep.Revision)
	wantServiceError(t, err, client.ErrClaimLost, 409, "claim_lost")
	if !errors.Is(err, protocol.ErrClaimLost) {
		t.Fatalf("not protocol.ErrClaimLost: %v", err)
	}
	// The key can be claimed again at once.
	mustHit(t, e.c, claimHit("r-1", "h2"), protocol.ResultOK)
}

// TestHitRateLimitedAndReset: a denied hit is a value with its wait; Reset
// fills the buckets again.
func TestHitRateLimitedAndReset(t *testing.T) {
	e := start(t, nil)
	req := protocol.HitRequest{Charges: []protocol.Charge{hookCharge("beta", 2)}}
	mustHit(t, e.c, req, protocol.ResultOK)
	last := mustHit(t, e.c, req, protocol.ResultOK)
	if len(last.Limits) != 1 || last.Limits[0].Remaining != 0 {
		t.Fatalf("limits after the burst: %+v", last.Limits)
	}
	denied := mustHit(t, e.c, req, protocol.ResultRateLimited)
	if denied.RetryAfterMs < 1 || denied.Revision != 0 {
		t.Fatalf("rate limited: %+v", denied)
	}
	// Another tenant is not affected.
	mustHit(t, e.c, protocol.HitRequest{Charges: []protocol.Charge{hookCharge("gamma", 2)}}, protocol.ResultOK)

	if err := e.c.Reset(ctxT(t), "beta"); err != nil {
		t.Fatalf("reset: %v", err)
	}
	mustHit(t, e.c, req, protocol.ResultOK)
}

func TestReserveReleaseCount(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	req := protocol.ReserveRequest{Principal: "acme", Key: "exports", Max: 2, TTLMs: time.Minute.Milliseconds()}
	for i, want := range []protocol.ReserveReply{{Granted: true, Count: 1}, {Granted: true, Count: 2}, {Granted: false, Count: 2}} {
		got, err := e.c.Reserve(ctx, req)
		if err != nil || got != want {
			t.Fatalf("reserve %d: %+v %v, want %+v", i, got, err, want)
		}
	}
	if n, err := e.c.Count(ctx, "acme", "exports"); err != nil || n != 2 {
		t.Fatalf("count: %d %v", n, err)
	}
	for i, want := range []int64{1, 0, 0} { // at zero, a no-op
		if n, err := e.c.Release(ctx, "acme", "exports"); err != nil || n != want {
			t.Fatalf("release %d: %d %v, want %d", i, n, err, want)
		}
	}
	if n, err := e.c.Count(ctx, "acme", "never"); err != nil || n != 0 {
		t.Fatalf("count of an unknown key: %d %v", n, err)
	}
}

// TestReserveConcurrent: many callers race for the slots; exactly Max win.
func TestReserveConcurrent(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	const callers, slots = 24, 5
	var granted atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			rep, err := e.c.Reserve(ctx, protocol.ReserveRequest{Principal: "p", Key: "k", Max: slots})
			if err != nil {
				t.Errorf("reserve: %v", err)
				return
			}
			if rep.Granted {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if granted.Load() != slots {
		t.Fatalf("%d granted, want %d", granted.Load(), slots)
	}
	if n, err := e.c.Count(ctx, "p", "k"); err != nil || n != slots {
		t.Fatalf("count: %d %v", n, err)
	}
}

// ---- replay.claim ----

func TestClaimReplay(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	const until = 4102444800 // 2100-01-01
	for i, c := range []struct {
		ns, key string
		want    protocol.ReplayOutcome
	}{
		{"acme/sw", "m1", protocol.Claimed},
		{"acme/sw", "m1", protocol.AlreadyClaimed},
		{"other", "m1", protocol.Claimed}, // namespaces are separate
		{"acme/sw", "m2", protocol.Claimed},
		{"acme/sw", "m3", protocol.Full},           // capacity 3 reached
		{"acme/sw", "m2", protocol.AlreadyClaimed}, // a duplicate still is one
	} {
		got, err := e.c.ClaimReplay(ctx, c.ns, c.key, until)
		if err != nil || got != c.want {
			t.Fatalf("step %d (%s %s): %v %v, want %v", i, c.ns, c.key, got, err, c.want)
		}
	}
}

// ---- cooldown.* ----

func TestCooldown(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	now := time.Now().UnixMilli()
	until := now + time.Hour.Milliseconds()
	snap := protocol.Snapshot{Key: "tpm", Label: "Tokens per minute", Percent: 70.5, ResetsAtMs: now + 60000, ObservedAtMs: now}

	if err := e.c.Record(ctx, protocol.Reading{Account: "acct", Backend: "b1", ObservedAtMs: now, Snapshots: []protocol.Snapshot{snap}}); err != nil {
		t.Fatalf("record: %v", err)
	}
	if err := e.c.Penalize(ctx, "acct", "b2", &until); err != nil {
		t.Fatalf("penalize: %v", err)
	}
	got, err := e.c.Load(ctx, "acct", []string{"b2", "b1", "never"})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("load: %d entries", len(got))
	}
	if b2 := got[0]; b2.Backend != "b2" || b2.LastCheckedMs != nil || len(b2.Snapshots) != 0 || b2.PenaltyUntilMs == nil || *b2.PenaltyUntilMs != until {
		t.Fatalf("b2: %+v", b2)
	}
	if b1 := got[1]; b1.Backend != "b1" || b1.LastCheckedMs == nil || *b1.LastCheckedMs != now ||
		len(b1.Snapshots) != 1 || b1.Snapshots[0] != snap || b1.PenaltyUntilMs != nil {
		t.Fatalf("b1: %+v", b1)
	}
	if n := got[2]; n.Backend != "never" || n.LastCheckedMs != nil || n.PenaltyUntilMs != nil || len(n.Snapshots) != 0 || n.Fallback {
		t.Fatalf("never: %+v", n)
	}

	// nil clears the penalty.
	if err := e.c.Penalize(ctx, "acct", "b2", nil); err != nil {
		t.Fatalf("clear: %v", err)
	}
	got, err = e.c.Load(ctx, "acct", []string{"b2"})
	if err != nil || len(got) != 1 || got[0].PenaltyUntilMs != nil {
		t.Fatalf("after clear: %+v %v", got, err)
	}
	// A reading clears a penalty whose instant it has reached.
	if err := e.c.Penalize(ctx, "acct", "b3", &now); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Record(ctx, protocol.Reading{Account: "acct", Backend: "b3", ObservedAtMs: now + 1}); err != nil {
		t.Fatal(err)
	}
	got, err = e.c.Load(ctx, "acct", []string{"b3"})
	if err != nil || got[0].PenaltyUntilMs != nil || got[0].LastCheckedMs == nil || *got[0].LastCheckedMs != now+1 {
		t.Fatalf("after a reading past the penalty: %+v %v", got, err)
	}
}

// ---- errors ----

// TestInvalid: every method's 400 is ErrInvalid with the service's reason.
func TestInvalid(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	cases := []struct {
		name   string
		call   func() error
		reason string
	}{
		{"hit without charges or claim", func() error { _, err := e.c.Hit(ctx, protocol.HitRequest{}); return err }, "no charges and no claim"},
		{"hit that can never pass", func() error {
			_, err := e.c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{{Kind: "hooks", Tenant: "a", IncrementUs: 2, CapacityUs: 1}}})
			return err
		}, "can never pass"},
		{"hit with two tenants", func() error {
			_, err := e.c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hookCharge("a", 1), {Kind: "bytes", Tenant: "b", IncrementUs: 1, CapacityUs: 1}}})
			return err
		}, "one tenant"},
		{"reset without tenant", func() error { return e.c.Reset(ctx, "") }, "tenant must be 1..256 bytes"},
		{"reserve max 0", func() error {
			_, err := e.c.Reserve(ctx, protocol.ReserveRequest{Principal: "p", Key: "k"})
			return err
		}, "max must be >= 1, got 0"},
		{"release without principal", func() error { _, err := e.c.Release(ctx, "", "k"); return err }, "principal must be 1..256 bytes"},
		{"count without key", func() error { _, err := e.c.Count(ctx, "p", ""); return err }, "key must be 1..256 bytes"},
		{"settle revision 0", func() error { return e.c.Settle(ctx, "a", "s", "k", "h", 0) }, "revision must be >= 1"},
		{"release claim without hook id", func() error { return e.c.ReleaseClaim(ctx, "a", "s", "k", "", 1) }, "hook id must be"},
		{"get without tenant", func() error { _, err := e.c.GetClaim(ctx, "", "s", "k"); return err }, "tenant must be"},
		{"replay without namespace", func() error { _, err := e.c.ClaimReplay(ctx, "", "k", 1); return err }, "namespace must be 1..256 bytes"},
		{"replay retain_until negative", func() error { _, err := e.c.ClaimReplay(ctx, "n", "k", -1); return err }, "retain_until must be in 0..253402300799"},
		{"record without account", func() error { return e.c.Record(ctx, protocol.Reading{Backend: "b"}) }, "account must be 1..256 bytes"},
		{"penalize until_ms negative", func() error { u := int64(-1); return e.c.Penalize(ctx, "a", "b", &u) }, "until_ms must be in 0.."},
		{"load without backends", func() error { _, err := e.c.Load(ctx, "a", nil); return err }, "backends: must have 1..100 entries"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantServiceError(t, err, client.ErrInvalid, 400, protocol.InvalidRequest.Code+": ")
			wantServiceError(t, err, client.ErrInvalid, 400, tc.reason)
			if errors.Is(err, protocol.ErrUnavailable) || errors.Is(err, client.ErrClaimLost) {
				t.Fatalf("400 wraps another sentinel too: %v", err)
			}
			if !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("error text %q lacks the reason", err)
			}
		})
	}

	// What cannot even be encoded is ErrInvalid without a round trip.
	err := e.c.Record(ctx, protocol.Reading{Account: "a", Backend: "b", Snapshots: []protocol.Snapshot{{Percent: math.NaN()}}})
	var se *client.ServiceError
	if !errors.Is(err, client.ErrInvalid) || errors.As(err, &se) {
		t.Fatalf("NaN percent: %v", err)
	}
}

// TestUnavailable: a stopped service, a responder that never answers, a
// cancelled context and a closed connection are protocol.ErrUnavailable, within the
// call's budget.
func TestUnavailable(t *testing.T) {
	const budget = 300 * time.Millisecond
	const slack = 200 * time.Millisecond // timer and scheduling latency under -race
	e := start(t, nil, client.WithTimeout(budget), client.WithSettleTimeout(budget))
	ctx := context.Background() // no deadline: the client's budget applies
	if _, err := e.c.Count(ctx, "p", "k"); err != nil {
		t.Fatalf("up: %v", err)
	}
	if err := e.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"hit":   func() error { _, err := e.c.Hit(ctx, claimHit("k", "h")); return err },
		"reset": func() error { return e.c.Reset(ctx, "t") },
		"reserve": func() error {
			_, err := e.c.Reserve(ctx, protocol.ReserveRequest{Principal: "p", Key: "k", Max: 1})
			return err
		},
		"release":       func() error { _, err := e.c.Release(ctx, "p", "k"); return err },
		"count":         func() error { _, err := e.c.Count(ctx, "p", "k"); return err },
		"settle":        func() error { return e.c.Settle(ctx, "a", "s", "k", "h", 1) },
		"release claim": func() error { return e.c.ReleaseClaim(ctx, "a", "s", "k", "h", 1) },
		"get":           func() error { _, err := e.c.GetClaim(ctx, "a", "s", "k"); return err },
		"replay":        func() error { _, err := e.c.ClaimReplay(ctx, "n", "k", 1); return err },
		"record":        func() error { return e.c.Record(ctx, protocol.Reading{Account: "a", Backend: "b"}) },
		"penalize":      func() error { return e.c.Penalize(ctx, "a", "b", nil) },
		"load":          func() error { _, err := e.c.Load(ctx, "a", []string{"b"}); return err },
	}
	for name, call := range calls {
		t0 := time.Now()
		err := call()
		// Nobody answers: that is known at once, no need to wait.
		if d := time.Since(t0); d >= budget {
			t.Errorf("%s: answered after %v, budget %v", name, d, budget)
		}
		if !errors.Is(err, protocol.ErrUnavailable) {
			t.Errorf("%s after Stop: want errUnavailable, got %v", name, err)
			continue
		}
		// After Stop nobody answers; a request that raced the
		// unsubscribe is told the service is stopping.
		var se *client.ServiceError
		if !errors.Is(err, nats.ErrNoResponders) && !(errors.As(err, &se) && se.Reason == protocol.ServiceStopping.Code) {
			t.Errorf("%s after Stop: %v", name, err)
		}
	}

	t.Run("no answer within the budget", func(t *testing.T) {
		sub, err := e.kit.Conn.Subscribe("mute.v1.>", func(*nats.Msg) {}) // never answers
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := e.kit.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		c, err := client.New(e.nc, client.WithPrefix("mute"), client.WithTimeout(budget))
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		_, err = c.Count(context.Background(), "p", "k")
		if d := time.Since(t0); d < budget || d > budget+slack {
			t.Errorf("no deadline: took %v, budget %v", d, budget)
		}
		if !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("no deadline: %v", err)
		}
		// A deadline of the caller wins, shorter or longer than the budget.
		for _, d := range []time.Duration{budget / 3, 2 * budget} {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			t0 := time.Now()
			_, err = c.Count(ctx, "p", "k")
			took := time.Since(t0)
			cancel()
			if took < d || took > d+slack || !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("ctx deadline %v: took %v, %v", d, took, err)
			}
		}
		// Settle waits for its own (longer) budget.
		c, err = client.New(e.nc, client.WithPrefix("mute"), client.WithTimeout(budget/3), client.WithSettleTimeout(budget))
		if err != nil {
			t.Fatal(err)
		}
		t0 = time.Now()
		err = c.Settle(context.Background(), "a", "s", "k", "h", 1)
		if d := time.Since(t0); d < budget || d > budget+slack || !errors.Is(err, protocol.ErrUnavailable) {
			t.Errorf("settle: took %v, %v", d, err)
		}
	})

	t.Run("cancelled context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := e.c.Count(cctx, "p", "k")
		if !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled: %v", err)
		}
	})

	t.Run("closed connection", func(t *testing.T) {
		nc, err := e.kit.Server.Connect()
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
		if _, err := c.Count(context.Background(), "p", "k"); !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("count on a closed connection: %v", err)
		}
		if err := c.SettleAsync("a", "s", "k", "h", 1); !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("settle event on a closed connection: %v", err)
		}
	})
}

// TestStoreUnavailable: the service's own 503 — its replay store lives on a
// server that is shut down — is protocol.ErrUnavailable with the reason.
func TestStoreUnavailable(t *testing.T) {
	store := testkit.New(t)
	rs, err := claims.NewKVReplay(store.Bucket(t, claims.ReplayBucketConfig(kvstore.BucketNames("sluice").Replay, 10, 1)))
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, func(c *service.Config) {
		c.Replay = rs
		c.StoreTimeout = 200 * time.Millisecond
	}, client.WithTimeout(5*time.Second)) // longer than the service's: see its answer
	ctx := ctxT(t)
	if got, err := e.c.ClaimReplay(ctx, "n", "up", 4102444800); err != nil || got != protocol.Claimed {
		t.Fatalf("up: %v %v", got, err)
	}
	store.Server.Shutdown()
	_, err = e.c.ClaimReplay(ctx, "n", "down", 4102444800)
	wantServiceError(t, err, protocol.ErrUnavailable, 503, protocol.StoreUnavailable.Code)
}

// TestErrorMapping: what a responder answers — error headers of every code,
// replies off the contract — maps to the documented sentinel. The
// responder is a plain subscription (the real service cannot be made to
// answer 500 or garbage on demand).
func TestErrorMapping(t *testing.T) {
	kit := testkit.New(t)
	var mu sync.Mutex
	var answer *nats.Msg
	sub, err := kit.Conn.Subscribe("fake.v1.>", func(m *nats.Msg) {
		mu.Lock()
		a := answer
		mu.Unlock()
		_ = m.RespondMsg(&nats.Msg{Header: a.Header, Data: a.Data})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := kit.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	nc, err := kit.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc, client.WithPrefix("fake"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)

	fail := func(code, reason string) *nats.Msg {
		return &nats.Msg{Header: nats.Header{micro.ErrorCodeHeader: {code}, micro.ErrorHeader: {reason}}}
	}
	body := func(s string) *nats.Msg { return &nats.Msg{Data: []byte(s)} }
	reset := func() error { return c.Reset(ctx, "t") }
	cases := []struct {
		name   string
		answer *nats.Msg
		call   func() error
		want   error
		code   int // of the *ServiceError; -1: none
	}{
		{"400", fail("400", "invalid_request: x"), reset, client.ErrInvalid, 400},
		{"409", fail("409", "claim_lost"), func() error { return c.Settle(ctx, "a", "s", "k", "h", 1) }, protocol.ErrClaimLost, 409},
		{"503", fail("503", "store_unavailable"), reset, protocol.ErrUnavailable, 503},
		{"503 stopping", fail("503", "service_stopping"), reset, protocol.ErrUnavailable, 503},
		{"500", fail("500", "internal_error"), reset, client.ErrInternal, 500},
		{"unknown code", fail("418", "teapot"), reset, client.ErrInternal, 418},
		{"code not a number", fail("x", "?"), reset, client.ErrInternal, 0},
		{"not JSON", body("not json"), reset, client.ErrBadReply, -1},
		{"ok false", body(`{"ok":false}`), reset, client.ErrBadReply, -1},
		{"hit without result", body(`{}`), func() error { _, err := c.Hit(ctx, protocol.HitRequest{}); return err }, client.ErrBadReply, -1},
		{"get without state", body(`{}`), func() error { _, err := c.GetClaim(ctx, "a", "s", "k"); return err }, client.ErrBadReply, -1},
		{"unknown replay result", body(`{"result":"maybe"}`), func() error { _, err := c.ClaimReplay(ctx, "n", "k", 1); return err }, client.ErrBadReply, -1},
		{"load entry count", body(`{"backends":[]}`), func() error { _, err := c.Load(ctx, "a", []string{"b"}); return err }, client.ErrBadReply, -1},
		{"count as string", body(`{"count":"1"}`), func() error { _, err := c.Count(ctx, "p", "k"); return err }, client.ErrBadReply, -1},
	}
	sentinels := []error{client.ErrInvalid, client.ErrClaimLost, protocol.ErrUnavailable, client.ErrInternal, client.ErrBadReply}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			answer = tc.answer
			mu.Unlock()
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("wraps %d sentinels: %v", n, err)
			}
			var se *client.ServiceError
			switch ok := errors.As(err, &se); {
			case tc.code < 0 && ok:
				t.Fatalf("a ServiceError for a reply: %v", se)
			case tc.code >= 0 && (!ok || se.Code != tc.code || se.Subject == ""):
				t.Fatalf("service error %+v, want code %d", se, tc.code)
			}
		})
	}
	// An unknown hit result (a later version's) is a value.
	mu.Lock()
	answer = body(`{"result":"queued","hook_id":"h"}`)
	mu.Unlock()
	if rep, err := c.Hit(ctx, protocol.HitRequest{}); err != nil || rep.Result != "queued" || rep.HookID != "h" {
		t.Fatalf("unknown hit result: %+v %v", rep, err)
	}
}

// ---- custom prefix ----

func TestCustomPrefix(t *testing.T) {
	e := start(t, func(c *service.Config) { c.Prefix = "acme.sl" }, client.WithPrefix("acme.sl"))
	if got, err := e.c.ClaimReplay(ctxT(t), "n", "k", 4102444800); err != nil || got != protocol.Claimed {
		t.Fatalf("replay on acme.sl: %v %v", got, err)
	}
	def, err := client.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := def.ClaimReplay(ctxT(t), "n", "k", 4102444800); !errors.Is(err, protocol.ErrUnavailable) || !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("default prefix against acme.sl: %v", err)
	}
}

// ---- settle and release events ----

// eventSink records what is published on the settle and release subjects.
type eventSink struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func (s *eventSink) all() []*nats.Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*nats.Msg(nil), s.msgs...)
}

func sinkEvents(t *testing.T, nc *nats.Conn) *eventSink {
	t.Helper()
	s := &eventSink{}
	sub, err := nc.Subscribe("sluice.v1.events.*", func(m *nats.Msg) {
		s.mu.Lock()
		s.msgs = append(s.msgs, m)
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSettleReleaseClaimAsync: the events are published on the subjects of the
// contract with its payload, and a running settler applies them.
func TestSettleReleaseClaimAsync(t *testing.T) {
	e := start(t, nil)
	ctx := ctxT(t)
	settler, err := events.NewSettler(e.kit.JS, e.claims, e.quota, protocol.DefaultPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := settler.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(settler.Stop)
	sink := sinkEvents(t, e.kit.Conn)

	// Invalid events are refused and never published.
	for name, err := range map[string]error{
		"revision 0":    e.c.SettleAsync("acme", "gh", "k", "h", 0),
		"no hook id":    e.c.ReleaseClaimAsync("acme", "gh", "k", "", 1),
		"no tenant":     e.c.SettleAsync("", "gh", "k", "h", 1),
		"bad hook id":   e.c.SettleAsync("acme", "gh", "k", "\xff", 1),
		"key too large": e.c.SettleAsync("acme", "gh", strings.Repeat("k", 70<<10), "h", 1),
	} {
		if !errors.Is(err, client.ErrInvalid) {
			t.Errorf("%s: want ErrInvalid, got %v", name, err)
		}
	}

	s := mustHit(t, e.c, claimHit("async-s", "h1"), protocol.ResultOK)
	r := mustHit(t, e.c, claimHit("async-r", "h2"), protocol.ResultOK)
	if err := e.c.SettleAsync("acme", "gh", "async-s", "h1", s.Revision); err != nil {
		t.Fatal(err)
	}
	if err := e.c.ReleaseClaimAsync("acme", "gh", "async-r", "h2", r.Revision); err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	testkit.Eventually(t, 5*time.Second, func() bool { return len(sink.all()) == 2 }, "both events seen on their subjects")
	for i, want := range []struct {
		subject string
		ev      protocol.SettleEvent
	}{
		{"sluice.v1.events.settle", protocol.SettleEvent{Tenant: "acme", Source: "gh", Key: "async-s", HookID: "h1", Revision: s.Revision}},
		{"sluice.v1.events.release", protocol.SettleEvent{Tenant: "acme", Source: "gh", Key: "async-r", HookID: "h2", Revision: r.Revision}},
	} {
		m := sink.all()[i]
		var got protocol.SettleEvent
		if err := json.Unmarshal(m.Data, &got); err != nil || m.Subject != want.subject || got != want.ev || m.Reply != "" {
			t.Fatalf("event %d: %s %s (%v), want %s %+v", i, m.Subject, m.Data, err, want.subject, want.ev)
		}
	}

	testkit.Eventually(t, 10*time.Second, func() bool {
		st, err := e.c.GetClaim(ctx, "acme", "gh", "async-s")
		return err == nil && st.State == protocol.StateCommitted && st.HookID == "h1"
	}, "the settle event is applied")
	testkit.Eventually(t, 10*time.Second, func() bool {
		st, err := e.c.GetClaim(ctx, "acme", "gh", "async-r")
		return err == nil && st.State == protocol.StateAbsent
	}, "the release event is applied")
	mustHit(t, e.c, claimHit("async-s", "h9"), protocol.ResultDuplicate)
	mustHit(t, e.c, claimHit("async-r", "h9"), protocol.ResultOK)
}

// TestWithTenant: a client for acme calls the scoped subjects (what a
// service-role user may publish): acme's calls are served, another
// tenant's are refused by the service (400).
func TestWithTenant(t *testing.T) {
	e := start(t, nil, client.WithTenant("acme"))
	ctx := ctxT(t)
	seen := make(chan string, 16)
	sub, err := e.kit.Conn.Subscribe("sluice.v1.t.>", func(m *nats.Msg) { seen <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.kit.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	rep := mustHit(t, e.c, claimHit("d-1", "h1"), protocol.ResultOK)
	if err := e.c.Settle(ctx, "acme", "gh", "d-1", "h1", rep.Revision); err != nil {
		t.Fatal(err)
	}
	if s := <-seen; s != "sluice.v1.t.acme.quota.hit" {
		t.Fatalf("hit sent to %q", s)
	}
	_, err = e.c.GetClaim(ctx, "globex", "gh", "d-1")
	wantServiceError(t, err, client.ErrInvalid, 400, "invalid_request")
	if _, err := client.New(e.nc, client.WithTenant("")); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Fatalf("empty tenant: %v", err)
	}
}
