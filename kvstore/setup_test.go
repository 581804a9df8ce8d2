package kvstore_test

import (
	"context"
	"testing"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/testkit"
)

// newBucket is the setup of most tests here: a server of its own, a
// bucket of cfg on it, and a context ending with the test.
func newBucket(t *testing.T, cfg kvstore.BucketConfig) (context.Context, *kvstore.Bucket) {
	t.Helper()
	_, ctx, b := kitBucket(t, cfg)
	return ctx, b
}

// kitBucket is newBucket with the kit, for a test that opens more.
func kitBucket(t *testing.T, cfg kvstore.BucketConfig) (*testkit.Kit, context.Context, *kvstore.Bucket) {
	t.Helper()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	return k, ctx, k.Bucket(t, cfg)
}

// reopened creates the bucket of cfg through node 0 of cl and returns it
// opened again, idempotently, through node 1 (not necessarily the stream
// leader's node).
func reopened(t *testing.T, cl *testkit.ClusterKit, cfg kvstore.BucketConfig) *kvstore.Bucket {
	t.Helper()
	cl.Bucket(t, 0, cfg)
	return cl.Bucket(t, 1, cfg)
}
