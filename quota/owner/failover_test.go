package owner

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// crashable starts n workers on k's server, each on a connection of its
// own (closing it crashes the worker: no release, its leases lapse).
func crashable(t *testing.T, k *testkit.Kit, e *fleetEnv, n int, opts ...Option) []member {
	t.Helper()
	ms := make([]member, n)
	for i := range ms {
		nc := connect(t, k)
		ms[i] = member{w: e.startWorker(t, nc, opts...), nc: nc}
	}
	waitBalanced(t, 15*time.Second, workers(ms)...)
	return ms
}

// crashableFleet starts a server, the env's buckets on it and n crashable
// workers over p partitions.
func crashableFleet(t *testing.T, n, p int) (*testkit.Kit, *fleetEnv, []member, []*Worker) {
	t.Helper()
	k, e := kitEnv(t)
	ms := crashable(t, k, e, n, quota.WithPartitions(p))
	return k, e, ms, workers(ms)
}

// crash closes member i's connection and leaves it out of ws (a crashed
// worker may still list the partitions it can no longer serve).
func crash(ms []member, ws []*Worker, i int) {
	ms[i].nc.Close()
	ws[i] = nil
}

// A partition taken over after its owner died starts from a conservative
// state: each bucket holds an eighth of its burst at
// the takeover, so a tenant whose burst was spent gets that, not a whole
// burst. A graceful handover (the owner releases) starts full, as before.
func TestTakeoverAfterLapseStartsConservative(t *testing.T) {
	t.Parallel()
	const p, burst = 8, 20
	k, e, ms, ws := crashableFleet(t, 3, p)
	c := e.client(t, k.Conn, quota.WithPartitions(p), quota.WithBudget(2*time.Second))
	ctx := testkit.Context(t)
	const tenant = "hammered"
	n := quota.Partition(tenant, p)
	saver := tenantFor(n, p) // same partition, never charged before the crash
	admitted := func(tn string, tries int) int {
		ok := 0
		for range tries {
			rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{hooks(tn, burst)}})
			if err != nil {
				t.Fatalf("hit %s: %v", tn, err)
			}
			if rep.Result == protocol.ResultOK {
				ok++
			}
		}
		return ok
	}
	if got := admitted(tenant, burst+5); got != burst {
		t.Fatalf("before the crash %d admitted, want the burst %d", got, burst)
	}
	owner := ownerOf(n, ws...)
	crash(ms, ws, owner)
	next := waitNewOwner(t, n, owner, ws)
	if got := admitted(tenant, burst); got != burst/takeoverShare {
		t.Fatalf("after the owner died: %d admitted to a tenant whose burst was spent, want %d (a conservative start)", got, burst/takeoverShare)
	}
	if got := admitted(saver, burst); got != burst/takeoverShare {
		t.Fatalf("after the owner died: %d admitted to an untouched tenant, want %d", got, burst/takeoverShare)
	}

	// A graceful handover: the buckets start full at the next owner.
	if err := ms[next].w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	ws[next] = nil
	waitNewOwner(t, n, next, ws)
	if got := admitted(tenant, burst+5); got != burst {
		t.Fatalf("after a graceful handover %d admitted, want a full burst %d", got, burst)
	}
}

// When the owner dies under load, the fleet admits at most one burst over
// the limit: the surviving fallbacks divide the burst
// among the live members and the new owner starts conservatively. A
// tenant at half its rate, all through one node, sees no 429 across the
// same failover.
func TestOwnerDeathOverAdmissionAndHalfRate(t *testing.T) {
	t.Parallel()
	const p, burst = 8, 20
	_, e, ms, ws := crashableFleet(t, 3, p)
	const hammered = "hammered"
	n := quota.Partition(hammered, p)
	steady := tenantFor(n, p) // on the same partition
	owner := ownerOf(n, ws...)
	var fleets []*quota.Fleet
	for i, m := range ms {
		if i == owner {
			continue
		}
		f, err := quota.NewFleet(e.client(t, m.nc, quota.WithPartitions(p), quota.WithBudget(500*time.Millisecond)), mustLimiter(t), e.store, quota.WithMembers(m.w.Members))
		if err != nil {
			t.Fatal(err)
		}
		fleets = append(fleets, f)
	}
	// steady: 10/s with a burst of 20, sent at 5/s at most (evenly spaced)
	// through one node.
	steadyLim, _ := gcra.LimitFromRate(10, burst)
	steadyCharge := protocol.Charge{Kind: protocol.KindHooks, Tenant: steady, IncrementUs: steadyLim.Increment, CapacityUs: steadyLim.Capacity}

	var hammer, steadily tally
	l := newLoad()
	l.loop(4, func(i int) {
		hammer.add(fleets[i%len(fleets)].Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks(hammered, burst)}}))
	})
	// At most one hit per 200 ms (two increments): a call that took
	// longer (the fallback waits out the budget) is not made up for.
	l.every(200*time.Millisecond, func() {
		steadily.add(fleets[0].Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{steadyCharge}}))
	})
	testkit.Eventually(t, 10*time.Second, func() bool { return hammer.ok.Load() >= burst && steadily.ok.Load() >= 5 }, "burst spent, steady under way")
	crash(ms, ws, owner)
	waitNewOwner(t, n, owner, ws)
	after := steadily.ok.Load()
	testkit.Eventually(t, 10*time.Second, func() bool { return steadily.ok.Load() >= after+10 }, "steady served by the new owner")
	l.stop()
	errs := hammer.failed.Load() + steadily.failed.Load()
	over := hammer.ok.Load() - burst
	t.Logf("owner died: %d admitted over the burst %d (%d by the fallback); steady: %d ok (%d local), %d denied; %d errors",
		over, burst, hammer.local.Load(), steadily.ok.Load(), steadily.local.Load(), steadily.denied.Load(), errs)
	// Two fallbacks with a third of the burst each (6), one more each
	// when the dead member leaves the count (its share grows to a half),
	// and an eighth of the burst at the new owner (2): at most 16,
	// measured 14-15; without the division and the conservative start,
	// 2 × 20 + 20.
	if bound := int64(2*(burst/3+1) + burst/takeoverShare); over > bound || over > burst {
		t.Errorf("over-admission %d, above %d (one burst is %d)", over, bound, burst)
	}
	if hammer.local.Load() == 0 || steadily.local.Load() == 0 {
		t.Errorf("the fallback answered nothing (hammered %d, steady %d): the failover was not crossed", hammer.local.Load(), steadily.local.Load())
	}
	if steadily.denied.Load() != 0 {
		t.Errorf("a tenant at half its rate was denied %d times across the failover", steadily.denied.Load())
	}
	if errs != 0 {
		t.Errorf("%d calls failed", errs)
	}
}

// TestFleetSharesLimit: with no owner answering, each node's fallback
// applies 1/M of a limit (rate and burst), M the live members.
func TestFleetSharesLimit(t *testing.T) {
	t.Parallel()
	k, e := kitEnv(t)
	for _, c := range []struct{ members, want int }{{0, 20}, {1, 20}, {4, 5}, {40, 1}} {
		m := c.members
		f, err := quota.NewFleet(e.client(t, k.Conn, quota.WithBudget(20*time.Millisecond)), mustLimiter(t), e.store, quota.WithMembers(func() int { return m }))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for range 25 {
			rep, err := f.Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 20)}})
			if err != nil || !rep.Fallback {
				t.Fatalf("members %d: %+v %v", m, rep, err)
			}
			if rep.Result == protocol.ResultOK {
				got++
			}
		}
		if got != c.want {
			t.Errorf("members %d: the fallback admitted %d of a burst of 20, want %d", m, got, c.want)
		}
	}
	if _, err := quota.NewFleet(e.client(t, k.Conn), mustLimiter(t), e.store, quota.WithMembers(nil)); err == nil {
		t.Error("WithMembers(nil) accepted")
	}
}
