package owner

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// fallbacks reads sluice_quota_fallback_total{op} from reg.
func fallbacks(t *testing.T, reg *prometheus.Registry, op string) float64 {
	t.Helper()
	return testkit.MetricSeries(t, reg, "sluice_quota_fallback_total")[op]
}

const (
	logDegraded  = "fleet unavailable"
	logRecovered = "fleet reachable again"
)

func newTestFleet(t *testing.T, c *quota.Router) (*quota.Fleet, *prometheus.Registry, *testkit.LogBuffer) {
	t.Helper()
	reg := prometheus.NewRegistry()
	buf := &testkit.LogBuffer{}
	f, err := quota.NewFleet(c, mustLimiter(t), newMemory(t), quota.WithRegisterer(reg), quota.WithLogger(slog.New(slog.NewTextHandler(buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return f, reg, buf
}

// fleetSlack is what a quota.Fleet call may take beyond its budget: scheduling
// on a loaded machine, not work (the calls stop at the budget).
const fleetSlack = 100 * time.Millisecond

func TestFleetFallbackAndRecovery(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	// The budget is large enough that the owner's 60% and the claim's rest
	// both fit on a loaded two-core CI machine; the slack is small beside
	// it, so a call that took twice its budget fails.
	const budget = 500 * time.Millisecond
	const slack = fleetSlack
	f, reg, logs := newTestFleet(t, e.client(t, k.Conn, quota.WithBudget(budget)))
	ctx := context.Background()

	// No worker serves the prefix: every call answers from local state
	// within the budget (plus slack), marked Local.
	claim := func(key, hook string) *protocol.ClaimRequest {
		return &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: key, HookID: hook}
	}
	steps := []struct {
		req  protocol.HitRequest
		want string
	}{
		{protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("k1", "h1")}, protocol.ResultOK},
		{protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("k1", "h2")}, protocol.ResultPending}, // refunded
		{protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("k2", "h3")}, protocol.ResultOK},
		{protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("k3", "h4")}, protocol.ResultRateLimited},
	}
	for i, s := range steps {
		start := time.Now()
		rep, err := f.Hit(ctx, s.req)
		el := time.Since(start)
		if err != nil || rep.Result != s.want || !rep.Fallback {
			t.Fatalf("step %d: %+v %v, want local %s", i, rep, err, s.want)
		}
		if el > budget+slack {
			t.Fatalf("step %d answered after %v (budget %v)", i, el, budget)
		}
	}
	// Counter calls have no fallback: a node-local counter would let
	// each node grant up to max.
	if _, err := f.Router().Reserve(ctx, protocol.ReserveRequest{Principal: "acme", Key: "slots", Max: 1}); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("reserve without an owner: %v, want ErrUnavailable", err)
	}
	// Invalid requests are never answered locally.
	if _, err := f.Hit(ctx, protocol.HitRequest{}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("invalid: %v", err)
	}
	if got := fallbacks(t, reg, quota.OpHit); got != float64(len(steps)) {
		t.Fatalf("fallback_total{op=hit} = %v, want %d", got, len(steps))
	}
	if n := strings.Count(logs.String(), logDegraded); n != 1 || !f.Degraded() {
		t.Fatalf("%d degraded log lines, want 1 (one per transition)", n)
	}

	// A worker comes up: calls reach the fleet again, one recovery line.
	w := e.startWorker(t, k.Conn)
	waitServed(t, 10*time.Second, w)
	for range 3 {
		rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 5)}})
		if err != nil || rep.Fallback || rep.Result != protocol.ResultOK {
			t.Fatalf("after recovery: %+v %v", rep, err)
		}
	}
	if n := strings.Count(logs.String(), logRecovered); n != 1 || f.Degraded() {
		t.Fatalf("%d recovered log lines, want 1", n)
	}

	// It goes away again: degraded once more, one more line.
	if err := w.Stop(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("zeta", 5)}}); err != nil || !rep.Fallback {
			t.Fatalf("after the worker stopped: %+v %v", rep, err)
		}
	}
	if n := strings.Count(logs.String(), logDegraded); n != 2 {
		t.Fatalf("%d degraded log lines, want 2", n)
	}
}

func TestFleetFallbackServerDown(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	wnc := connect(t, k)
	w := e.startWorker(t, wnc)
	waitServed(t, 10*time.Second, w)
	const budget = 500 * time.Millisecond
	f, reg, logs := newTestFleet(t, e.client(t, k.Conn, quota.WithBudget(budget)))
	ctx := context.Background()
	if rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}}); err != nil || rep.Fallback || rep.Result != protocol.ResultOK {
		t.Fatalf("fleet up: %+v %v", rep, err)
	}
	// The server goes away, and the worker with it (its process dies: its
	// connection is closed, so its Stop in the cleanup does not wait for KV).
	k.Server.Shutdown()
	wnc.Close()
	for i := range 3 {
		start := time.Now()
		rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}})
		el := time.Since(start)
		want := protocol.ResultOK // the local limiter knows nothing of the fleet's charge
		if i > 0 {
			want = protocol.ResultRateLimited
		}
		if err != nil || !rep.Fallback || rep.Result != want {
			t.Fatalf("server down, hit %d: %+v %v, want local %s", i, rep, err, want)
		}
		if el > budget+fleetSlack {
			t.Fatalf("server down, hit %d answered after %v", i, el)
		}
	}
	if got := fallbacks(t, reg, quota.OpHit); got != 3 {
		t.Fatalf("fallback_total{op=hit} = %v", got)
	}
	if n := strings.Count(logs.String(), logDegraded); n != 1 {
		t.Fatalf("%d degraded lines", n)
	}
}

// While the quota.Router's quota.WithReachable says the owners are out of reach (an
// edge cut off from its hub), a quota.Fleet answers every call from node-local
// state without a request to an owner, and the quota.Router alone fails at once;
// once it says they are back, calls reach the owners.
func TestFleetUnreachableSkipsTheOwners(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	w := e.startWorker(t, k.Conn)
	waitServed(t, 10*time.Second, w)
	// Every request published on the owners' subjects is counted (the
	// worker still answers them).
	var sent atomic.Int64
	sub, err := k.Conn.Subscribe(e.prefix+".v1.quota.>", func(*nats.Msg) { sent.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := k.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	var reachable atomic.Bool
	reg := prometheus.NewRegistry()
	f, err := quota.NewFleet(e.client(t, k.Conn, quota.WithReachable(reachable.Load)), mustLimiter(t), e.store, quota.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	claim := &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: "k1", HookID: "h1"}
	for i, want := range []string{protocol.ResultOK, protocol.ResultRateLimited} {
		rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}, Claim: claim})
		if err != nil || !rep.Fallback || rep.Result != want {
			t.Fatalf("unreachable, hit %d: %+v %v, want local %s", i, rep, err, want)
		}
	}
	if st, err := e.store.Get(ctx, claims.ID{Tenant: "acme", Source: "gh", Key: "k1"}); err != nil || st.HookID != "h1" {
		t.Fatalf("the local hit's claim is not in the fleet's store: %+v %v", st, err)
	}
	if err := f.Reset(ctx, "acme"); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("unreachable reset: %v", err)
	}
	// Invalid requests are still refused, never answered locally.
	if _, err := f.Hit(ctx, protocol.HitRequest{}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("invalid hit: %v", err)
	}
	if err := f.Reset(ctx, ""); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("invalid reset: %v", err)
	}
	// The quota.Router alone (a service's) fails at once, invalid requests first.
	if _, err := f.Router().Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}}); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("client hit while unreachable: %v", err)
	}
	if _, err := f.Router().Count(ctx, protocol.CounterRequest{Principal: "acme", Key: "slots"}); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("client count while unreachable: %v", err)
	}
	if _, err := f.Router().Hit(ctx, protocol.HitRequest{}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("client invalid hit while unreachable: %v", err)
	}
	if err := k.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("%d requests reached the owners' subjects while they were unreachable", n)
	}
	if got := fallbacks(t, reg, quota.OpHit); got != 2 {
		t.Fatalf("fallback_total{op=hit} = %v, want 2", got)
	}
	// Reachable again: the owners decide (their buckets know nothing of
	// the local charges).
	reachable.Store(true)
	rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}})
	if err != nil || rep.Fallback || rep.Result != protocol.ResultOK {
		t.Fatalf("reachable: %+v %v", rep, err)
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return sent.Load() > 0 }, "a request on the owners' subjects")
}

// A hub maps its leaves' partition subjects (quota.HubPrefix) onto its owners'.
func TestHubMapping(t *testing.T) {
	from, to := quota.HubMapping("sluice")
	if from != "sluice.hub.v1.quota.p.*" || to != "sluice.v1.quota.p.{{wildcard(1)}}" {
		t.Fatalf("HubMapping = %q -> %q", from, to)
	}
	if got := quota.PartitionSubject(quota.HubPrefix("sluice"), 7); got != "sluice.hub.v1.quota.p.7" {
		t.Fatalf("a leaf's partition subject = %q", got)
	}
}

// Fleet.Reset resets every kind of the tenant in the node-local fallback,
// as the owners reset every kind: a source's own kind ("hooks@gh", the
// edge's kind for a source with its own limits) as well as the tenant's,
// and nothing of another tenant, even one whose name starts with it.
func TestFleetResetEveryKind(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	var reachable atomic.Bool // never: every hit is answered from local state
	f, err := quota.NewFleet(e.client(t, k.Conn, quota.WithReachable(reachable.Load)), mustLimiter(t), e.store, quota.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	charge := func(tenant, kind string) protocol.Charge {
		c := hooks(tenant, 1)
		c.Kind = kind
		return c
	}
	charges := []protocol.Charge{
		charge("acme", protocol.KindHooks),
		charge("acme", protocol.KindBytes),
		charge("acme", protocol.KindHooks+"@gh"),
		charge("acme", "custom"),
		charge("acme2", protocol.KindHooks+"@gh"),
	}
	hit := func(c protocol.Charge) string {
		t.Helper()
		rep, err := f.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{c}})
		if err != nil || !rep.Fallback {
			t.Fatalf("hit %s/%s: %+v %v, want a local answer", c.Tenant, c.Kind, rep, err)
		}
		return rep.Result
	}
	for _, c := range charges {
		if got := hit(c); got != protocol.ResultOK {
			t.Fatalf("first hit %s/%s: %s", c.Tenant, c.Kind, got)
		}
		if got := hit(c); got != protocol.ResultRateLimited {
			t.Fatalf("second hit %s/%s: %s, want its burst of 1 spent", c.Tenant, c.Kind, got)
		}
	}
	if err := f.Reset(ctx, "acme"); !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("reset with the owners out of reach: %v, want ErrUnavailable", err)
	}
	for _, c := range charges {
		want := protocol.ResultOK // reset: full again
		if c.Tenant != "acme" {
			want = protocol.ResultRateLimited
		}
		if got := hit(c); got != want {
			t.Fatalf("after Reset(acme), hit %s/%s: %s, want %s", c.Tenant, c.Kind, got, want)
		}
	}
}
