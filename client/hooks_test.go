package client_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestConsumeAll: one durable consumer per shard's stream, read together,
// gives every tenant's hooks once, each tenant's in order; one tenant's
// stream is HooksStream's.
func TestConsumeAll(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	const shards, tenants, per = 3, 9, 6
	if _, err := hooks.EnsureStreams(ctx, k.JS, hooks.StreamConfig{Name: "HOOKS", Prefix: "sluice"}, shards, nil); err != nil {
		t.Fatal(err)
	}
	for _, stream := range client.HooksStreams(shards) {
		if _, err := k.JS.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "all", FilterSubject: "sluice.hooks.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
	}
	store := hooks.NewShardedHookStore(k.JS, "sluice", "HOOKS", shards)
	for n := range per {
		for i := range tenants {
			h := hooks.Hook{ID: fmt.Sprintf("t%d-%d", i, n), Tenant: fmt.Sprintf("t%d", i), Source: "gh", ReceivedAt: time.Now()}
			if _, err := store.Store(ctx, h); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	got := map[string][]string{}
	cs, err := client.ConsumeAll(ctx, k.JS, shards, "all", func(m jetstream.Msg) {
		mu.Lock()
		tenant := m.Headers().Get(hooks.HeaderTenant)
		got[tenant] = append(got[tenant], m.Headers().Get(hooks.HeaderHookID))
		mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.StopAll()
	testkit.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ids := range got {
			n += len(ids)
		}
		return n == tenants*per
	}, "every hook consumed")
	mu.Lock()
	defer mu.Unlock()
	for i := range tenants {
		var want []string
		for n := range per {
			want = append(want, fmt.Sprintf("t%d-%d", i, n))
		}
		if tenant := fmt.Sprintf("t%d", i); !slices.Equal(got[tenant], want) {
			t.Fatalf("%s: %v, want %v", tenant, got[tenant], want)
		}
		if s := client.HooksStream(fmt.Sprintf("t%d", i), shards); s != protocol.TenantHooksStream(fmt.Sprintf("t%d", i), shards) {
			t.Fatalf("HooksStream: %s", s)
		}
	}
	if _, err := client.ConsumeAll(ctx, k.JS, shards+1, "all", func(jetstream.Msg) {}); err == nil {
		t.Fatal("a consumer on a stream that does not exist")
	}
}
