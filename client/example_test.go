package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/service"
)

// startSluice runs what one sluice node runs for these examples — an
// embedded nats-server with JetStream, the claims and replay stores, a
// quota worker owning every partition, and the sluice micro service — and
// returns a second connection, the one "your service" would have, and a
// function that stops it all.
func startSluice() (nc *nats.Conn, stop func()) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	must := func(err error) {
		if err != nil {
			stop()
			panic(err)
		}
	}
	dir, err := os.MkdirTemp("", "sluice-client-example")
	must(err)
	stops = append(stops, func() { os.RemoveAll(dir) })
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: dir})
	must(err)
	stops = append(stops, srv.Shutdown)
	node, err := srv.Connect()
	must(err)
	stops = append(stops, node.Close)
	js, err := jetstream.New(node)
	must(err)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := kvstore.BucketNames(kvstore.DefaultPrefix)
	cb, err := kvstore.OpenBucket(ctx, js, kvstore.BucketConfig{Name: names.Claims})
	must(err)
	rb, err := kvstore.OpenBucket(ctx, js, claims.ReplayBucketConfig(names.Replay, 1000, 1))
	must(err)
	store, err := claims.NewKV(cb)
	must(err)
	replay, err := claims.NewKVReplay(rb, 0)
	must(err)

	const partitions = 8
	leases, counts, err := quota.OpenBuckets(ctx, js, kvstore.DefaultPrefix, 1)
	must(err)
	w, err := owner.New(node, leases, counts, store, quota.WithPartitions(partitions))
	must(err)
	must(w.Start(ctx))
	stops = append(stops, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	for len(w.Partitions()) < partitions {
		if ctx.Err() != nil {
			must(errors.New("the quota worker did not take its partitions"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	qc, err := quota.NewClient(node, quota.WithPartitions(partitions))
	must(err)

	svc, err := service.New(node, service.Config{Quota: qc, Claims: store, Replay: replay})
	must(err)
	stops = append(stops, func() { _ = svc.Stop() })

	nc, err = srv.Connect()
	must(err)
	stops = append(stops, nc.Close)
	return nc, stop
}

// A webhook consumer charges the tenant's rate limit and takes a dedupe
// claim in one call, does its work, then settles the claim; the same
// delivery again is a duplicate naming the first hook. Settling twice is
// ErrClaimLost.
func ExampleClient_Hit() {
	nc, stop := startSluice()
	defer stop()
	c, err := client.New(nc)
	if err != nil {
		panic(err)
	}
	ctx := context.Background() // each call gets the 250 ms default budget

	// 10 hooks a second, bursts of 20.
	hooks := quota.Charge{Kind: quota.KindHooks, Tenant: "acme", IncrementUs: 100_000, CapacityUs: 2_000_000}
	hit := func(hookID string) quota.HitReply {
		rep, err := c.Hit(ctx, quota.HitRequest{
			Charges: []quota.Charge{hooks},
			Claim:   &quota.ClaimRequest{Tenant: "acme", Source: "github", Key: "delivery-1", HookID: hookID},
		})
		if err != nil {
			panic(err) // ErrUnavailable: fall back, or answer 503
		}
		return rep
	}

	rep := hit("hook-1")
	fmt.Println(rep.Result, rep.HookID)
	// … store the hook durably, then:
	if err := c.Settle(ctx, "acme", "github", "delivery-1", "hook-1", rep.Revision); err != nil {
		panic(err)
	}
	st, err := c.GetClaim(ctx, "acme", "github", "delivery-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(st.State, st.HookID)

	again := hit("hook-2")
	fmt.Println(again.Result, again.HookID)

	err = c.Settle(ctx, "acme", "github", "delivery-1", "hook-1", rep.Revision)
	fmt.Println(errors.Is(err, client.ErrClaimLost), errors.Is(err, claims.ErrLost))
	// Output:
	// ok hook-1
	// committed hook-1
	// duplicate hook-1
	// true true
}

// A concurrency quota: at most two exports per tenant at once. A denied
// reserve is a value, not an error; Release gives the slot back.
func ExampleClient_Reserve() {
	nc, stop := startSluice()
	defer stop()
	c, err := client.New(nc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	req := quota.ReserveRequest{Principal: "acme", Key: "exports", Max: 2}
	for range 3 {
		rep, err := c.Reserve(ctx, req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("granted=%v count=%d\n", rep.Granted, rep.Count)
	}
	n, err := c.Release(ctx, "acme", "exports")
	if err != nil {
		panic(err)
	}
	fmt.Println("after release:", n)
	n, err = c.Count(ctx, "acme", "exports")
	if err != nil {
		panic(err)
	}
	fmt.Println("count:", n)

	// max must be at least 1: the service answers 400, with its reason.
	_, err = c.Reserve(ctx, quota.ReserveRequest{Principal: "acme", Key: "exports"})
	var se *client.ServiceError
	if errors.Is(err, client.ErrInvalid) && errors.As(err, &se) {
		fmt.Println(se.Code, se.Reason)
	}
	// Output:
	// granted=true count=1
	// granted=true count=2
	// granted=false count=2
	// after release: 1
	// count: 1
	// 400 invalid_request: max must be >= 1, got 0
}

// A signed webhook whose message id and timestamp were seen before is a
// replay: claim the nonce and refuse the request unless it is new.
func ExampleClient_ClaimReplay() {
	nc, stop := startSluice()
	defer stop()
	c, err := client.New(nc)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	// Keep the nonce until the signature's tolerance window closes.
	retainUntil := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	for range 2 {
		out, err := c.ClaimReplay(ctx, "acme/stripe", "evt_1/1700000000", retainUntil)
		if err != nil {
			panic(err)
		}
		fmt.Println(out) // claims.Claimed, then claims.AlreadyClaimed
	}
	_, err = c.ClaimReplay(ctx, "", "evt_2", retainUntil)
	fmt.Println(errors.Is(err, client.ErrInvalid))
	// Output:
	// claimed
	// already_claimed
	// true
}
