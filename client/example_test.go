package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/service"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/ownerkit"
)

// startSluice runs what one sluice node runs for these examples — an
// embedded nats-server with JetStream (testkit), the claims and replay
// stores, a quota owner of every partition (testkit/ownerkit), and the
// sluice micro service — and returns a second connection, the one "your
// service" would have, and a function that stops it all.
func startSluice() (nc *nats.Conn, stop func()) {
	t := testkit.NewStandalone()
	ok := false
	defer func() {
		if !ok {
			t.Close()
		}
	}()
	k := testkit.New(t)
	names := kvstore.BucketNames(protocol.DefaultPrefix)
	store := testkit.ClaimsKV(t, k.Bucket(t, kvstore.BucketConfig{Name: names.Claims}))
	replay, err := claims.NewKVReplay(k.Bucket(t, claims.ReplayBucketConfig(names.Replay, 1000, 1)))
	if err != nil {
		panic(err)
	}
	_, qc := ownerkit.Serving(t, k, store, 8)
	svc, err := service.New(k.Conn, service.Config{Quota: qc, Claims: store, Replay: replay})
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	if nc, err = k.Server.Connect(); err != nil {
		panic(err)
	}
	t.Cleanup(nc.Close)
	ok = true
	return nc, t.Close
}

// startClient is startSluice and a Client on its connection, made as
// ExampleNew shows.
func startClient() (c *client.Client, stop func()) {
	nc, stop := startSluice()
	c, err := client.New(nc)
	if err != nil {
		stop()
		panic(err)
	}
	return c, stop
}

// A Client is made on your service's own NATS connection; an option with
// a bad value makes New fail with protocol.ErrInvalidOption.
func ExampleNew() {
	nc, stop := startSluice()
	defer stop()
	c, err := client.New(nc, client.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	n, err := c.Count(context.Background(), "acme", "exports")
	if err != nil {
		panic(err)
	}
	fmt.Println("count:", n)

	_, err = client.New(nc, client.WithTimeout(0))
	fmt.Println(errors.Is(err, protocol.ErrInvalidOption))
	// Output:
	// count: 0
	// true
}

// A webhook consumer charges the tenant's rate limit and takes a dedupe
// claim in one call, does its work, then settles the claim; the same
// delivery again is a duplicate naming the first hook. Settling twice is
// ErrClaimLost.
func ExampleClient_Hit() {
	c, stop := startClient()
	defer stop()
	ctx := context.Background() // each call gets the 250 ms default budget

	// 10 hooks a second, bursts of 20.
	hooks := protocol.Charge{Kind: protocol.KindHooks, Tenant: "acme", IncrementUs: 100_000, CapacityUs: 2_000_000}
	hit := func(hookID string) protocol.HitReply {
		rep, err := c.Hit(ctx, protocol.HitRequest{
			Charges: []protocol.Charge{hooks},
			Claim:   &protocol.ClaimRequest{Tenant: "acme", Source: "github", Key: "delivery-1", HookID: hookID},
		})
		if err != nil {
			panic(err) // errUnavailable: fall back, or answer 503
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
	fmt.Println(errors.Is(err, client.ErrClaimLost), errors.Is(err, protocol.ErrClaimLost))
	// Output:
	// ok hook-1
	// committed hook-1
	// duplicate hook-1
	// true true
}

// A concurrency quota: at most two exports per tenant at once. A denied
// reserve is a value, not an error; Release gives the slot back.
func ExampleClient_Reserve() {
	c, stop := startClient()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	req := protocol.ReserveRequest{Principal: "acme", Key: "exports", Max: 2}
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
	_, err = c.Reserve(ctx, protocol.ReserveRequest{Principal: "acme", Key: "exports"})
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
	c, stop := startClient()
	defer stop()
	ctx := context.Background()

	// Keep the nonce until the signature's tolerance window closes.
	retainUntil := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	for range 2 {
		out, err := c.ClaimReplay(ctx, "acme/stripe", "evt_1/1700000000", retainUntil)
		if err != nil {
			panic(err)
		}
		fmt.Println(out) // protocol.Claimed, then protocol.AlreadyClaimed
	}
	_, err := c.ClaimReplay(ctx, "", "evt_2", retainUntil)
	fmt.Println(errors.Is(err, client.ErrInvalid))
	// Output:
	// claimed
	// already_claimed
	// true
}
