package claims_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
)

// ExampleKV takes a webhook's dedupe key through both phases on an
// embedded nats-server: claim, store the hook, settle; a redelivery is then
// a duplicate. (testkit.New with a testkit.Standalone does this wiring;
// here it is written out.)
func ExampleKV() {
	dir, err := os.MkdirTemp("", "claims-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bucket, err := kvstore.OpenBucket(ctx, js, kvstore.BucketConfig{Name: kvstore.BucketNames("sluice").Claims})
	if err != nil {
		panic(err)
	}
	store, err := claims.NewKV(bucket)
	if err != nil {
		panic(err)
	}

	id := claims.ID{Tenant: "acme", Source: "github", Key: "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
	first, err := store.Claim(ctx, id, "hook-1", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("first delivery:", first.Outcome)

	// While hook-1 is being stored, a redelivery is told to come back later.
	again, _ := store.Claim(ctx, id, "hook-2", 30*time.Second)
	fmt.Println("redelivery while pending:", again.Outcome, "held by", again.HookID)

	// ... the hook is acked by JetStream: commit the claim for 72 h.
	if err := store.Settle(ctx, id, "hook-1", first.Revision, 72*time.Hour); err != nil {
		panic(err) // errors.Is(err, protocol.ErrClaimLost): the pending claim expired first
	}
	dup, _ := store.Claim(ctx, id, "hook-3", 30*time.Second)
	fmt.Println("redelivery after settle:", dup.Outcome, "of", dup.HookID)

	st, _ := store.Get(ctx, id)
	fmt.Println("state:", st.State, st.HookID)
	// Output:
	// first delivery: ok
	// redelivery while pending: pending held by hook-1
	// redelivery after settle: duplicate of hook-1
	// state: committed hook-1
}
