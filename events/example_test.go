package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/testkit"
)

// A node wires a Publisher, a claims store that reports its state changes,
// the partition owner and its client (the one settle path), a Settler
// applying settle/release events and an ExpiryWatcher. Any client can then
// settle a claim by publishing to <prefix>.v1.events.settle.
func Example() {
	t := testkit.NewStandalone() // an embedded nats-server (claims.ExampleKV writes it out)
	defer t.Close()
	k := testkit.New(t)
	nc, js, ctx := k.Conn, k.JS, testkit.Context(t)

	const prefix = "sluice"
	bucket := k.Bucket(t, kvstore.BucketConfig{Name: kvstore.BucketNames(prefix).Claims})
	pub, _ := events.NewPublisher(nc, prefix)
	defer pub.Close()
	kv, err := claims.NewKV(bucket)
	if err != nil {
		panic(err)
	}
	store := events.ObserveStore(kv, pub)
	leases, counts, err := quota.OpenBuckets(ctx, js, prefix, 1)
	if err != nil {
		panic(err)
	}
	w, err := owner.New(nc, leases, counts, store)
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()
	qc, _ := quota.NewRouter(nc, quota.WithLocalOwner(w))

	settler, _ := events.NewSettler(js, store, qc, prefix)
	if err := settler.Start(ctx); err != nil {
		panic(err)
	}
	defer settler.Stop()
	watcher, _ := events.NewExpiryWatcher(js, bucket.Name(), pub)
	if err := watcher.Start(ctx); err != nil {
		panic(err)
	}
	defer watcher.Stop()

	id := claims.ID{Tenant: "acme", Source: "github", Key: "delivery-1"}
	res, _ := store.Claim(ctx, id, "hook-1", 30*time.Second)

	// Any client, in any language: publish and move on.
	subj := pub.Subjects()
	ev, _ := json.Marshal(protocol.SettleEvent{Tenant: id.Tenant, Source: id.Source, Key: id.Key, HookID: "hook-1", Revision: res.Revision})
	_ = nc.Publish(subj.Settle(), ev)

	for {
		st, _ := store.Get(ctx, id)
		if st.State == protocol.StateCommitted {
			fmt.Println(st.State, st.HookID)
			break
		}
		select {
		case <-ctx.Done():
			fmt.Println("not settled:", ctx.Err())
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Println(subj.ClaimExpired("acme"))
	// Output:
	// committed hook-1
	// sluice.v1.events.claim.expired.acme
}
