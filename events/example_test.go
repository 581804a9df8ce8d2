package events_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
)

// A node wires a Publisher, a claims store that reports its state changes,
// the partition owner and its client (the one settle path), a Settler
// applying settle/release events and an ExpiryWatcher. Any client can then
// settle a claim by publishing to <prefix>.v1.events.settle.
func Example() {
	dir, _ := os.MkdirTemp("", "sluice-events-example")
	defer os.RemoveAll(dir)
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, _ := srv.Connect()
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	const prefix = "sluice"
	bucket, err := kvstore.OpenBucket(ctx, js, kvstore.BucketConfig{Name: kvstore.BucketNames(prefix).Claims})
	if err != nil {
		panic(err)
	}
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
	qc, _ := quota.NewClient(nc, quota.WithLocalOwner(w))

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
