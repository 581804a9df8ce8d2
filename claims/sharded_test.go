package claims_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestShardedKVStore runs the suite on a store of three KV shards.
func TestShardedKVStore(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	runStoreSuite(t, func(t *testing.T) storeFixture {
		var shards []claims.Store
		for range 3 {
			shards = append(shards, newKV(t, k.Bucket(t, kvstore.BucketConfig{Name: bucketName("claims_sharded")})))
		}
		return storeFixture{store: testkit.Must(claims.NewSharded(shards...))(t), elapse: noElapse}
	})
}

// TestShardedRoutesByTenant: each tenant's claims are in the bucket of
// protocol.Shard(tenant, 3) and in no other, every method included.
func TestShardedRoutesByTenant(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	var shards []claims.Store
	for range 3 {
		shards = append(shards, newKV(t, k.Bucket(t, kvstore.BucketConfig{Name: bucketName("claims_route")})))
	}
	s := testkit.Must(claims.NewSharded(shards...))(t)
	for i := range 30 {
		tenant := fmt.Sprintf("t%d", i)
		id := claims.ID{Tenant: tenant, Source: "gh", Key: "k"}
		res, err := s.Claim(ctx, id, "h-"+tenant, time.Minute)
		if err != nil || res.Outcome != claims.OK {
			t.Fatalf("claim %s: %+v %v", tenant, res, err)
		}
		started, err := s.StartSettleOwn(id, "h-"+tenant, res.Revision, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := started.Wait(ctx); !done || err != nil {
			if err := s.SettleOwn(ctx, id, "h-"+tenant, "", res.Revision, time.Hour); err != nil {
				t.Fatalf("settle %s: %v", tenant, err)
			}
		}
		want := protocol.Shard(tenant, 3)
		for k, sh := range shards {
			st, err := sh.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if inShard := st.State == protocol.StateCommitted; inShard != (k == want) {
				t.Fatalf("tenant %s (shard %d): shard %d holds %q", tenant, want, k, st.State)
			}
		}
		if st, err := s.Get(ctx, id); err != nil || st.State != protocol.StateCommitted || st.HookID != "h-"+tenant {
			t.Fatalf("get %s through the sharded store: %+v %v", tenant, st, err)
		}
	}
	if _, err := s.Claim(ctx, claims.ID{Source: "gh", Key: "k"}, "h", time.Minute); !errors.Is(err, protocol.ErrInvalid) {
		t.Fatalf("a claim without a tenant: %v", err)
	}
	if _, err := claims.NewSharded(); err == nil {
		t.Fatal("no shards accepted")
	}
}
