package owner

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

func TestPartitionMatchesFNV1a(t *testing.T) {
	// Known FNV-1a 32 values (nats-server's partition() uses hash/fnv New32a).
	known := []struct {
		in   string
		hash uint32
	}{
		{"", 0x811c9dc5},
		{"a", 0xe40c292c},
		{"foobar", 0xbf9cf968},
	}
	for i, k := range known {
		for _, p := range []int{1, 7, 64, 1024} {
			if got, want := quota.Partition(k.in, p), int(k.hash%uint32(p)); got != want {
				t.Errorf("%d: quota.Partition(%q, %d) = %d, want %d", i, k.in, p, got, want)
			}
		}
	}
	for _, s := range []string{"acme", "tenant-42", "a.b", "日本"} {
		h := fnv.New32a()
		h.Write([]byte(s))
		if got, want := quota.Partition(s, 64), int(h.Sum32()%64); got != want {
			t.Errorf("quota.Partition(%q, 64) = %d, want %d", s, got, want)
		}
	}
}

func TestHitChargesAndDenial(t *testing.T) {
	t.Parallel()
	_, _, _, c := single(t)
	ctx := testkit.Context(t)
	req := protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 3)}}
	for i := range 3 {
		rep, err := c.Hit(ctx, req)
		if err != nil || rep.Result != protocol.ResultOK {
			t.Fatalf("hit %d: %+v %v", i, rep, err)
		}
		if len(rep.Limits) != 1 || rep.Limits[0].Remaining != int64(2-i) {
			t.Fatalf("hit %d: limits %+v", i, rep.Limits)
		}
	}
	rep, err := c.Hit(ctx, req)
	if err != nil || rep.Result != protocol.ResultRateLimited || rep.RetryAfterMs < 3_599_000 || rep.RetryAfterMs > 3_600_000 {
		t.Fatalf("4th hit: %+v %v", rep, err)
	}
	// All-or-nothing: a charge that fits plus one that does not spends neither.
	both := protocol.HitRequest{Charges: []protocol.Charge{hooks("beta", 1), {Kind: protocol.KindBytes, Tenant: "beta", IncrementUs: 10, CapacityUs: 10}}}
	if rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{{Kind: protocol.KindBytes, Tenant: "beta", IncrementUs: 10_000_000, CapacityUs: 10_000_000}}}); err != nil || rep.Result != protocol.ResultOK {
		t.Fatalf("bytes: %+v %v", rep, err)
	}
	if rep, err := c.Hit(ctx, both); err != nil || rep.Result != protocol.ResultRateLimited {
		t.Fatalf("both: %+v %v", rep, err)
	}
	if rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("beta", 1)}}); err != nil || rep.Result != protocol.ResultOK {
		t.Fatalf("hooks alone after a denied pair: %+v %v", rep, err)
	}
	// Reset makes the tenant's buckets full again.
	if err := c.Reset(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Hit(ctx, req); err != nil || rep.Result != protocol.ResultOK {
		t.Fatalf("after reset: %+v %v", rep, err)
	}
}

func TestHitInvalid(t *testing.T) {
	t.Parallel()
	k, e, _, c := single(t)
	ctx := testkit.Context(t)
	cases := map[string]protocol.HitRequest{
		"two tenants":      {Charges: []protocol.Charge{hooks("a", 1), {Kind: protocol.KindBytes, Tenant: "b", IncrementUs: 1, CapacityUs: 1}}},
		"claim of another": {Charges: []protocol.Charge{hooks("a", 1)}, Claim: &protocol.ClaimRequest{Tenant: "b", Source: "s", Key: "k", HookID: "h"}},
		"impossible":       {Charges: []protocol.Charge{{Kind: protocol.KindBytes, Tenant: "a", IncrementUs: 11, CapacityUs: 10}}},
		"empty":            {},
		"same kind twice":  {Charges: []protocol.Charge{hooks("a", 1), hooks("a", 2)}},
		"long hook id":     {Charges: []protocol.Charge{hooks("a", 1)}, Claim: &protocol.ClaimRequest{Tenant: "a", Source: "s", Key: "k", HookID: strings.Repeat("h", 257)}},
	}
	for name, r := range cases {
		if _, err := c.Hit(ctx, r); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("%s: err = %v, want protocol.ErrInvalid", name, err)
		}
	}
	// The owner answers 400 with the micro headers (a client that skipped
	// validation, or another language).
	body := `{"op":"hit","hit":{"charges":[{"kind":"hooks","tenant":"a","increment_us":1,"capacity_us":1},{"kind":"bytes","tenant":"b","increment_us":1,"capacity_us":1}]}}`
	wantRefused(t, k.Conn, quota.PartitionSubject(e.prefix, quota.Partition("a", protocol.DefaultPartitions)), []byte(body), "invalid hit")
	// Misrouted (a client with another partition count): 400 too.
	wrong := (quota.Partition("a", protocol.DefaultPartitions) + 1) % protocol.DefaultPartitions
	wantRefused(t, k.Conn, quota.PartitionSubject(e.prefix, wrong), []byte(`{"op":"reset","reset":{"tenant":"a"}}`), "misrouted")
	// A client configured with another P gets protocol.ErrInvalid from the owner.
	c32 := e.client(t, k.Conn, quota.WithPartitions(32))
	for i := 0; ; i++ {
		tenant := "t" + strconv.Itoa(i)
		if quota.Partition(tenant, 32) == quota.Partition(tenant, 64) {
			continue
		}
		if _, err := c32.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks(tenant, 1)}}); !errors.Is(err, protocol.ErrInvalid) {
			t.Fatalf("P mismatch: %v", err)
		}
		break
	}
}

func TestHitClaimSpendsNothingUnlessOK(t *testing.T) {
	t.Parallel()
	_, e, _, c := single(t)
	ctx := testkit.Context(t)
	claim := func(hookID string) *protocol.ClaimRequest {
		return &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: "delivery-1", HookID: hookID, PendingTTLMs: 30_000}
	}
	// Burst 2: the first hit takes a pending claim and one charge.
	rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("h1")})
	if err != nil || rep.Result != protocol.ResultOK || rep.Revision == 0 || len(rep.Limits) != 1 || rep.Limits[0].Remaining != 1 {
		t.Fatalf("first: %+v %v", rep, err)
	}
	// The same key again: pending, with a retry-after; no charge spent.
	for range 3 {
		rep2, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("h2")})
		if err != nil || rep2.Result != protocol.ResultPending || rep2.HookID != "h1" || rep2.RetryAfterMs < 1 || rep2.RetryAfterMs > 30_000 {
			t.Fatalf("pending: %+v %v", rep2, err)
		}
	}
	// Commit it: now a duplicate, still no charge spent.
	id := claims.ID{Tenant: "acme", Source: "gh", Key: "delivery-1"}
	if err := e.store.Settle(ctx, id, "h1", rep.Revision, time.Hour); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		rep3, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: claim("h3")})
		if err != nil || rep3.Result != protocol.ResultDuplicate || rep3.HookID != "h1" {
			t.Fatalf("duplicate: %+v %v", rep3, err)
		}
	}
	// One charge is left of the burst of 2.
	if rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}}); err != nil || rep.Result != protocol.ResultOK || rep.Limits[0].Remaining != 0 {
		t.Fatalf("remaining charge: %+v %v", rep, err)
	}
	// Denied: no claim written.
	other := &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: "delivery-2", HookID: "h4"}
	if rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}, Claim: other}); err != nil || rep.Result != protocol.ResultRateLimited {
		t.Fatalf("denied: %+v %v", rep, err)
	}
	st, err := e.store.Get(ctx, claims.ID{Tenant: "acme", Source: "gh", Key: "delivery-2"})
	if err != nil || st.State != protocol.StateAbsent {
		t.Fatalf("a denied hit wrote a claim: %+v %v", st, err)
	}
	// A claim with no charges works too.
	if rep, err := c.Hit(ctx, protocol.HitRequest{Claim: other}); err != nil || rep.Result != protocol.ResultOK {
		t.Fatalf("claim only: %+v %v", rep, err)
	}
}

// failingStore is a claims.Store whose Claim fails.
type failingStore struct {
	claims.Store
	err error
}

func (s failingStore) Claim(context.Context, claims.ID, string, time.Duration) (claims.Result, error) {
	return claims.Result{}, s.err
}

// StartClaim fails too: nothing started, the owner calls Claim.
func (s failingStore) StartClaim(claims.ID, string, time.Duration) (claims.StartedClaim, error) {
	return nil, s.err
}

func TestHitClaimStoreUnavailableRefunds(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	w := e.newWorker(t, k.Conn, failingStore{err: protocol.ErrUnavailable})
	waitServed(t, 10*time.Second, w)
	c := e.client(t, k.Conn)
	ctx := testkit.Context(t)
	cl := &protocol.ClaimRequest{Tenant: "acme", Source: "gh", Key: "k", HookID: "h"}
	for range 3 {
		if _, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}, Claim: cl}); !errors.Is(err, protocol.ErrUnavailable) {
			t.Fatalf("store down: %v", err)
		}
	}
	// The charge was refunded every time: burst 1 still available.
	if rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}}); err != nil || rep.Result != protocol.ResultOK {
		t.Fatalf("after refunds: %+v %v", rep, err)
	}
}

func TestReserveRelease(t *testing.T) {
	t.Parallel()
	_, e, _, c := single(t)
	ctx := testkit.Context(t)
	r := protocol.ReserveRequest{Principal: "acme", Key: "jobs", Max: 3}
	for i := 1; i <= 3; i++ {
		rep, err := c.Reserve(ctx, r)
		if err != nil || !rep.Granted || rep.Count != int64(i) {
			t.Fatalf("reserve %d: %+v %v", i, rep, err)
		}
	}
	if rep, err := c.Reserve(ctx, r); err != nil || rep.Granted || rep.Count != 3 {
		t.Fatalf("4th reserve: %+v %v", rep, err)
	}
	// Written through before the reply.
	rec, err := e.counts.Get(ctx, quota.CounterKey("acme", "jobs"))
	if err != nil || string(rec.Value) != "3" || rec.TTL != DefaultCountTTL {
		t.Fatalf("stored count: %+v %v", rec, err)
	}
	cr := protocol.CounterRequest{Principal: "acme", Key: "jobs"}
	for i := 2; i >= 0; i-- {
		if rep, err := c.Release(ctx, cr); err != nil || rep.Count != int64(i) {
			t.Fatalf("release to %d: %+v %v", i, rep, err)
		}
	}
	// Release at zero is a no-op.
	if rep, err := c.Release(ctx, cr); err != nil || rep.Count != 0 {
		t.Fatalf("release at zero: %+v %v", rep, err)
	}
	if rep, err := c.Count(ctx, cr); err != nil || rep.Count != 0 {
		t.Fatalf("count: %+v %v", rep, err)
	}
	if _, err := c.Reserve(ctx, protocol.ReserveRequest{Principal: "acme", Key: "jobs", Max: 0}); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("max 0: %v", err)
	}
	// Other counters of the same principal are independent.
	if rep, err := c.Reserve(ctx, protocol.ReserveRequest{Principal: "acme", Key: "other", Max: 1}); err != nil || !rep.Granted || rep.Count != 1 {
		t.Fatalf("other counter: %+v %v", rep, err)
	}
}

func TestReserveLeakedSlotExpires(t *testing.T) {
	t.Parallel()
	_, _, _, c := single(t)
	ctx := testkit.Context(t)
	r := protocol.ReserveRequest{Principal: "acme", Key: "leaky", Max: 1, TTLMs: 1000}
	if rep, err := c.Reserve(ctx, r); err != nil || !rep.Granted {
		t.Fatalf("reserve: %+v %v", rep, err)
	}
	if rep, err := c.Reserve(ctx, r); err != nil || rep.Granted {
		t.Fatalf("second reserve: %+v %v", rep, err)
	}
	start := time.Now()
	testkit.Eventually(t, 5*time.Second, func() bool {
		rep, err := c.Reserve(ctx, r)
		return err == nil && rep.Granted && rep.Count == 1
	}, "the leaked slot came back")
	if el := time.Since(start); el < 500*time.Millisecond {
		t.Fatalf("slot came back after %v, before its TTL", el)
	} else {
		t.Logf("leaked slot returned after %v (TTL 1 s)", el)
	}
}

func TestConcurrentReserveOneCounter(t *testing.T) {
	t.Parallel()
	_, _, _, c := single(t)
	if granted := reserveRace(t, []*quota.Router{c}, protocol.ReserveRequest{Principal: "p", Key: "k", Max: 7}, 50); granted != 7 {
		t.Fatalf("granted %d, want 7", granted)
	}
}

func TestPartitionMismatchRefusesStart(t *testing.T) {
	t.Parallel()
	k, e, _, _ := single(t)
	if err := startRefused(t, k, e, quota.WithPartitions(32)); !errors.Is(err, quota.ErrPartitionMismatch) {
		t.Fatalf("start with P=32 on a P=64 fleet: %v", err)
	}
}

// startRefused makes an owner on e's buckets with opts and returns its
// Start's error; a Stop after it must succeed or say ErrNotStarted.
func startRefused(t *testing.T, k *testkit.Kit, e *fleetEnv, opts ...Option) error {
	t.Helper()
	w, err := New(k.Conn, e.leases, e.counts, e.store, append([]Option{quota.WithPrefix(e.prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Start(testkit.Context(t))
	t.Log(err)
	if err := w.Stop(testkit.Context(t)); err != nil && !errors.Is(err, ErrNotStarted) {
		t.Fatalf("stop after a failed start: %v", err)
	}
	return err
}

// TestShardMismatchRefusesStart: the shard count is recorded beside the
// partition count, and an owner with another one refuses to start, naming
// both; the record of a fleet without shards reads as 1 shard.
func TestShardMismatchRefusesStart(t *testing.T) {
	t.Parallel()
	k, e, _, _ := single(t)
	if _, err := New(k.Conn, e.leases, e.counts, e.store, quota.WithPrefix(e.prefix), WithShards(5)); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Fatalf("5 shards of 64 partitions: %v", err)
	}
	p, s, err := quota.FleetShape(testkit.Context(t), e.leases)
	if err != nil || p != 64 || s != 1 {
		t.Fatalf("fleet shape %d/%d, %v; want 64/1", p, s, err)
	}
	if err := startRefused(t, k, e, WithShards(4)); !errors.Is(err, quota.ErrShardMismatch) || !strings.Contains(err.Error(), "the fleet has 1 shards, this node is configured with 4") {
		t.Fatalf("start with S=4 on an S=1 fleet: %v", err)
	}
}

// TestOptionsValidate: every option with a bad value fails the constructor
// it applies to with protocol.ErrInvalidOption (an option that does not apply to a
// constructor does not compile).
func TestOptionsValidate(t *testing.T) {
	for name, o := range map[string]quota.RouterOption{
		"prefix": quota.WithPrefix("a..b"), "partitions": quota.WithPartitions(0), "budget": quota.WithBudget(0),
	} {
		if _, err := quota.NewRouter(&nats.Conn{}, o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("client %s: %v", name, err)
		}
	}
	for name, o := range map[string]Option{
		"prefix": quota.WithPrefix("a..b"), "partitions": quota.WithPartitions(0),
		"ttl": WithLeaseTTL(-1), "id": WithMemberID(""), "inflight": WithMaxInFlight(0),
		"pending": quota.WithPendingTTL(0), "count": WithCountTTL(0), "clock": quota.WithClock(nil),
	} {
		if _, err := New(&nats.Conn{}, &kvstore.Bucket{}, &kvstore.Bucket{}, newMemory(t), o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("worker %s: %v", name, err)
		}
	}
	client, err := quota.NewRouter(&nats.Conn{})
	if err != nil {
		t.Fatal(err)
	}
	local := mustLimiter(t)
	for name, o := range map[string]quota.FleetOption{
		"pending": quota.WithPendingTTL(0), "clock": quota.WithClock(nil),
	} {
		if _, err := quota.NewFleet(client, local, newMemory(t), o); !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("fleet %s: %v", name, err)
		}
	}
}

func TestClientUnavailableWithinBudget(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	c, err := quota.NewRouter(k.Conn, quota.WithPrefix(newPrefix()), quota.WithBudget(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 1)}})
	el := time.Since(start)
	if !errors.Is(err, protocol.ErrUnavailable) {
		t.Fatalf("no owner: %v", err)
	}
	if el < 90*time.Millisecond || el > 300*time.Millisecond {
		t.Fatalf("gave up after %v, budget 100 ms", el)
	}
	// The caller's deadline wins over the budget.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	start = time.Now()
	if _, err := c.Count(ctx, protocol.CounterRequest{Principal: "p", Key: "k"}); !errors.Is(err, protocol.ErrUnavailable) || time.Since(start) > 200*time.Millisecond {
		t.Fatalf("caller deadline: %v after %v", err, time.Since(start))
	}
}

func TestHitRefillWithInjectedClock(t *testing.T) {
	t.Parallel()
	clock := testkit.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 250_000_000, time.UTC))
	_, _, _, c := single(t, quota.WithClock(clock.Now))
	ctx := testkit.Context(t)
	// 1 hook/s, burst 2.
	req := protocol.HitRequest{Charges: []protocol.Charge{{Kind: protocol.KindHooks, Tenant: "acme", IncrementUs: 1_000_000, CapacityUs: 2_000_000}}}
	steps := []struct {
		advance time.Duration
		result  string
		retryMs int64
	}{
		{0, protocol.ResultOK, 0},
		{0, protocol.ResultOK, 0},
		{0, protocol.ResultRateLimited, 1000},
		{400 * time.Millisecond, protocol.ResultRateLimited, 600},
		{600 * time.Millisecond, protocol.ResultOK, 0},
		{0, protocol.ResultRateLimited, 1000},
		{5 * time.Second, protocol.ResultOK, 0},
		{0, protocol.ResultOK, 0},
		{0, protocol.ResultRateLimited, 1000},
	}
	for i, s := range steps {
		clock.Advance(s.advance)
		rep, err := c.Hit(ctx, req)
		if err != nil || rep.Result != s.result || rep.RetryAfterMs != s.retryMs {
			t.Fatalf("step %d: %+v %v; want %s retry %d ms", i, rep, err, s.result, s.retryMs)
		}
	}
}

func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, _, _, c := single(t, quota.WithRegisterer(reg))
	ctx := testkit.Context(t)
	for range 3 {
		if _, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 2)}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Reserve(ctx, protocol.ReserveRequest{Principal: "p", Key: "k", Max: 1}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		name, series string // series: its label values, "/"-joined
		want         float64
	}{
		{"sluice_quota_partitions_owned", "", protocol.DefaultPartitions},
		{"sluice_quota_hits_total", "ok", 2},
		{"sluice_quota_hits_total", "rate_limited", 1},
		{"sluice_quota_counter_ops_total", "reserve/granted", 1},
		{"sluice_quota_lease_events_total", "acquired", protocol.DefaultPartitions},
		{"sluice_quota_kv_in_flight", "", 0},
	} {
		if got, ok := testkit.MetricSeries(t, reg, m.name)[m.series]; !ok || got != m.want {
			t.Errorf("%s{%s} = %v (exposed: %v), want %v", m.name, m.series, got, ok, m.want)
		}
	}
}

func TestRestartWithSameIDTakesOverAtOnce(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	nc1 := connect(t, k)
	w1 := e.startWorker(t, nc1, WithMemberID("node-a"), WithLeaseTTL(5*time.Second))
	waitServed(t, 10*time.Second, w1)
	nc1.Close() // the process dies holding every lease

	// It comes back with the same id: its old leases name it, so it purges
	// them by revision and takes them again without waiting for expiry.
	start := time.Now()
	w2 := e.startWorker(t, k.Conn, WithMemberID("node-a"), WithLeaseTTL(5*time.Second))
	waitServed(t, 4*time.Second, w2)
	t.Logf("restarted member serves all partitions after %v (lease TTL 5 s)", time.Since(start))
	if _, err := e.client(t, k.Conn).Count(testkit.Context(t), protocol.CounterRequest{Principal: "p", Key: "k"}); err != nil {
		t.Fatal(err)
	}
}
