// Package ownerkit starts a real quota partition owner (owner.Worker) for
// a test, on the default prefix's buckets of a testkit server, stopped when
// the test ends. It is apart from testkit because quota/owner's own tests
// use testkit.
package ownerkit

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
	"github.com/sluice-dev/sluice/testkit"
)

// Start starts an owner on nc over the default prefix's leases and counts
// buckets (one replica) and store (nil: the default claims bucket's KV
// store, through nc too, so closing nc cuts all its traffic). t.Cleanup
// stops it without checking Stop's error (a test that checks it stops the
// owner itself).
func Start(t testkit.T, nc *nats.Conn, store claims.Store, opts ...owner.Option) *owner.Worker {
	t.Helper()
	ctx := testkit.Context(t)
	js := testkit.JetStream(t, nc)
	leases, counts, err := quota.OpenBuckets(ctx, js, protocol.DefaultPrefix, 1)
	if err != nil {
		t.Fatalf("ownerkit: buckets: %v", err)
	}
	if store == nil {
		cb, err := kvstore.OpenBucket(ctx, js, kvstore.BucketConfig{Name: kvstore.BucketNames(protocol.DefaultPrefix).Claims})
		if err != nil {
			t.Fatalf("ownerkit: claims bucket: %v", err)
		}
		store = testkit.ClaimsKV(t, cb)
	}
	w, err := owner.New(nc, leases, counts, store, opts...)
	if err != nil {
		t.Fatalf("ownerkit: %v", err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("ownerkit: start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// Serving starts the one owner of p partitions on k's connection (Start
// with quota.WithPartitions(p), then opts), waits until it serves every
// partition, and returns it with a quota Router on k's connection.
func Serving(t testkit.T, k *testkit.Kit, store claims.Store, p int, opts ...owner.Option) (*owner.Worker, *quota.Router) {
	t.Helper()
	w := Start(t, k.Conn, store, append([]owner.Option{quota.WithPartitions(p)}, opts...)...)
	testkit.Eventually(t, 10*time.Second, func() bool { return len(w.Partitions()) == p }, "the quota owner serves every partition")
	c, err := quota.NewRouter(k.Conn, quota.WithPartitions(p))
	if err != nil {
		t.Fatalf("ownerkit: client: %v", err)
	}
	return w, c
}
