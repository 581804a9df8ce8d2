package testkit_test

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// In a test: k := testkit.New(t) gives an embedded nats-server with
// JetStream, a connection and a JetStream context, all stopped when the test
// ends. Here a dedupe claim is taken, settled and seen as a duplicate.
func Example() {
	t := testkit.NewStandalone() // in a test: the test's *testing.T
	defer t.Close()

	k := testkit.New(t)
	ctx := testkit.Context(t)
	store, err := claims.NewKV(k.Bucket(t, kvstore.BucketConfig{Name: "claims"}))
	if err != nil {
		panic(err)
	}

	id := claims.ID{Tenant: "acme", Source: "github", Key: "delivery-1"}
	first, _ := store.Claim(ctx, id, "hook-1", 30*time.Second)
	fmt.Println(first.Outcome)
	_ = store.Settle(ctx, id, "hook-1", first.Revision, time.Hour)
	again, _ := store.Claim(ctx, id, "hook-2", 30*time.Second)
	fmt.Println(again.Outcome, again.HookID)
	// Output:
	// ok
	// duplicate hook-1
}
