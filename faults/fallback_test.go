package faults

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// TestFleetFallbackWithCallerDeadline: the edge calls Fleet.Hit with a
// context whose deadline is the store budget (edge/handler.go: hctx =
// StoreTimeout). When the partition owner does not answer, the fleet call
// uses up that deadline, and the node-local fallback must still answer:
// the in-memory claim must not run on the spent context (it did: every
// keyed hook got 503 while an owner failed over; issue #7's report).
func TestFleetFallbackWithCallerDeadline(t *testing.T) {
	t.Parallel()
	k := testkit.New(t) // no worker: nobody serves any partition
	const budget = 50 * time.Millisecond
	client, err := quota.NewClient(k.Conn, quota.WithBudget(budget), quota.WithPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	local, err := gcra.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := quota.NewFleet(client, local, claims.NewMemory(), quota.WithBudget(budget))
	if err != nil {
		t.Fatal(err)
	}
	lim, _ := gcra.LimitFromRate(10, 10)
	req := quota.HitRequest{
		Charges: []quota.Charge{{Kind: quota.KindHooks, Tenant: "t", IncrementUs: lim.Increment, CapacityUs: lim.Capacity}},
		Claim:   &quota.ClaimRequest{Tenant: "t", Source: "s", Key: "k", HookID: "h1"},
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	rep, err := fleet.Hit(ctx, req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("fallback hit with the caller's deadline: %v (after %v); want a node-local answer", err, took)
	}
	if !rep.Local || rep.Result != quota.ResultOK {
		t.Fatalf("fallback hit: %+v, want a local ok", rep)
	}
	if took > budget+10*time.Millisecond {
		t.Errorf("fallback answered after %v, budget %v", took, budget)
	}
	// The same key again on the same node while the first is unsettled:
	// in flight.
	ctx2, cancel2 := context.WithTimeout(context.Background(), budget)
	defer cancel2()
	req.Claim.HookID = "h2"
	rep, err = fleet.Hit(ctx2, req)
	if err != nil || rep.Result != quota.ResultPending {
		t.Fatalf("second claim: %+v, %v; want pending", rep, err)
	}
}
