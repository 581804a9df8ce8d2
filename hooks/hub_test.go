package hooks_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// TestEnsureHub: a hub's storage is every shard's hooks stream, the
// advisory capture with its shared consumer and DEADLETTER, and the
// consumers' metrics on the registry; the store it returns writes a
// tenant's hook to its shard's stream. Run twice, it changes nothing.
func TestEnsureHub(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	ctx := testkit.Context(t)
	const shards = 2
	reg := prometheus.NewRegistry()
	hs, err := hooks.EnsureHub(ctx, k.JS, hooks.StreamConfig{Shards: shards}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range k.JS.StreamNames(ctx).Name() {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{hooks.DeadLetterStream, "HOOKS", "HOOKS_1", hooks.AdvisoryStream}; !slices.Equal(names, want) {
		t.Fatalf("streams %v, want %v", names, want)
	}
	if _, err := k.JS.Consumer(ctx, hooks.AdvisoryStream, hooks.AdvisoryConsumer); err != nil {
		t.Fatalf("the advisory consumer: %v", err)
	}
	if got := testkit.MetricSeries(t, reg, "sluice_consumer_metrics_dropped"); len(got) != 1 {
		t.Fatalf("sluice_consumer_metrics_dropped: %v, want one series", got)
	}
	tenant := "acme"
	if protocol.Shard(tenant, shards) != 1 {
		tenant = "globex"
	}
	if _, err := hs.Store(ctx, hooks.Hook{ID: "h1", Tenant: tenant, Source: "gh", ReceivedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st, err := k.JS.Stream(ctx, protocol.HooksStream(protocol.Shard(tenant, shards)))
	if err != nil {
		t.Fatal(err)
	}
	if msgs := testkit.StoredMsgs(t, st); len(msgs) != 1 || msgs[0].Subject != protocol.HookSubject(protocol.DefaultPrefix, tenant, "gh") {
		t.Fatalf("the shard's stream holds %d hooks, want the one stored", len(msgs))
	}
	if _, err := hooks.EnsureHub(ctx, k.JS, hooks.StreamConfig{Shards: shards}, nil, prometheus.NewRegistry()); err != nil {
		t.Fatalf("again: %v", err)
	}
	if _, err := hooks.EnsureHub(ctx, k.JS, hooks.StreamConfig{Shards: -1}, nil, nil); !errors.Is(err, hooks.ErrInvalidConfig) {
		t.Fatalf("negative shards: %v, want ErrInvalidConfig", err)
	}
}
