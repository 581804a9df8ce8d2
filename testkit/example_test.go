package testkit_test

import (
	"fmt"
	"os"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// exampleT stands in for the *testing.T a real test passes to testkit.New.
type exampleT struct {
	dir      string
	cleanups []func()
}

func (e *exampleT) Helper()                      {}
func (e *exampleT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (e *exampleT) Cleanup(f func())             { e.cleanups = append(e.cleanups, f) }
func (e *exampleT) TempDir() string              { return e.dir }
func (e *exampleT) done() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

// In a test: k := testkit.New(t) gives an embedded nats-server with
// JetStream, a connection and a JetStream context, all stopped when the test
// ends. Here a dedupe claim is taken, settled and seen as a duplicate.
func Example() {
	dir, _ := os.MkdirTemp("", "testkit-example")
	defer os.RemoveAll(dir)
	t := &exampleT{dir: dir}
	defer t.done()

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
