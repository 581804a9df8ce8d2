package forward_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/testkit"
)

// orderRig is a link with the hub's HOOKS stream, the leaf's outbox and a
// store into it.
type orderRig struct {
	*link
	hubStream jetstream.Stream
	outbox    jetstream.Stream
	store     *hooks.HookStore
}

func newOrderRig(t *testing.T, atomic bool) *orderRig {
	t.Helper()
	l := newLink(t)
	ctx := testkit.Context(t)
	st, err := hooks.EnsureStream(ctx, l.hubJS, hooks.StreamConfig{Prefix: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	if !atomic { // a hub whose HOOKS predates atomic batches
		cfg := st.CachedInfo().Config
		cfg.AllowAtomicPublish = false
		if st, err = l.hubJS.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	outbox, err := hooks.EnsureOutbox(ctx, l.edgeJS, hooks.OutboxConfig{Prefix: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	return &orderRig{link: l, hubStream: st, outbox: outbox, store: hooks.NewOutboxStore(l.edgeJS, "sluice", "HOOKS")}
}

// storeHooks stores n hooks with ids "<prefix>-<i>" in the outbox, one at
// a time (so the outbox order is i's), over 3 tenants and 2 sources; body
// returns hook i's body. It returns the ids in their outbox order.
func (r *orderRig) storeHooks(t *testing.T, prefix string, n int, body func(i int) []byte) []string {
	t.Helper()
	ctx := testkit.Context(t)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
		h := hooks.Hook{ID: ids[i], Tenant: fmt.Sprintf("t%d", i%3), Source: fmt.Sprintf("s%d", i%2), ReceivedAt: time.Now(), Body: body(i)}
		if _, err := r.store.Store(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// updateHub changes the hub's HOOKS configuration.
func (r *orderRig) updateHub(t *testing.T, change func(*jetstream.StreamConfig)) {
	t.Helper()
	ctx := testkit.Context(t)
	info, err := r.hubStream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	change(&cfg)
	if _, err := r.hubJS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// hubOrder is the hook ids in the hub's HOOKS in stream order.
func (r *orderRig) hubOrder(t *testing.T) []string {
	t.Helper()
	ctx := testkit.Context(t)
	info, err := r.hubStream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	if info.State.Msgs == 0 {
		return ids
	}
	c, err := r.hubStream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	for uint64(len(ids)) < info.State.Msgs {
		b, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			ids = append(ids, m.Headers().Get(hooks.HeaderHookID))
			n++
		}
		if n == 0 {
			t.Fatalf("hub HOOKS: read %d of %d messages", len(ids), info.State.Msgs)
		}
	}
	return ids
}

func (r *orderRig) start(t *testing.T, cfg forward.Config) *forward.Forwarder {
	t.Helper()
	cfg.Conn, cfg.Prefix, cfg.HubDomain, cfg.Name, cfg.Linked = r.edge, "sluice", "hub", "e1", r.edgeSrv.LeafConnected
	f, err := forward.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	return f
}

func small(int) []byte { return []byte(`{}`) }

func bothHubs(t *testing.T, test func(t *testing.T, atomic bool)) {
	t.Run("atomic", func(t *testing.T) { test(t, true) })
	t.Run("no-atomic", func(t *testing.T) { test(t, false) })
}

// The hub refuses one hook in the middle of a batch (larger than its
// MaxMsgSize) and would store the ones after it: it must hold only a
// prefix of the leaf's hooks while it refuses, and every hook in the
// leaf's order once it takes them.
func TestMiddleOfBatchRefused(t *testing.T) {
	bothHubs(t, func(t *testing.T, atomic bool) {
		r := newOrderRig(t, atomic)
		r.updateHub(t, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1024 })
		ids := r.storeHooks(t, "h", 6, func(i int) []byte {
			if i == 2 {
				return bytes.Repeat([]byte("x"), 2048)
			}
			return small(i)
		})
		f := r.start(t, forward.Config{})
		testkit.Eventually(t, 10*time.Second, func() bool { return f.Status().LastError != "" || testkit.Msgs(t, r.outbox) == 0 },
			"a failed forwarding attempt")
		if got := r.hubOrder(t); !slices.Equal(got, ids[:len(got)]) || len(got) > 2 {
			t.Fatalf("while hook 2 is refused the hub holds %v; want a prefix of %v up to hook 1", got, ids[:2])
		}
		if n := testkit.Msgs(t, r.outbox); n != 4 {
			t.Errorf("outbox holds %d hooks while the hub refuses hook 2", n)
		}
		r.updateHub(t, func(c *jetstream.StreamConfig) { c.MaxMsgSize = -1 })
		testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.outbox) == 0 }, "outbox drained")
		if got := r.hubOrder(t); !slices.Equal(got, ids) {
			t.Errorf("hub order %v, want %v", got, ids)
		}
	})
}

// The hub's HOOKS holds one leaf's hooks in the order the leaf stored
// them, over many batches, with hooks stored on the hub directly in
// between (the stream is shared) and more hooks stored at the leaf while
// it forwards.
func TestHubOrderIsOutboxOrder(t *testing.T) {
	bothHubs(t, func(t *testing.T, atomic bool) {
		r := newOrderRig(t, atomic)
		ctx := testkit.Context(t)
		var logs testkit.LogBuffer
		ids := r.storeHooks(t, "a", 300, small)
		f := r.start(t, forward.Config{Batch: 32, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		hubStore := hooks.NewShardedHookStore(r.hubJS, "sluice", "HOOKS", 1)
		for i := range 50 {
			if _, err := hubStore.Store(ctx, hooks.Hook{ID: fmt.Sprintf("hub-%d", i), Tenant: "t0", Source: "s0", ReceivedAt: time.Now(), Body: small(i)}); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, r.storeHooks(t, "b", 200, small)...)
		testkit.Eventually(t, 20*time.Second, func() bool { return testkit.Msgs(t, r.outbox) == 0 }, "outbox drained")
		got := r.hubOrder(t)
		if edgeHooks := slices.DeleteFunc(got, func(id string) bool { return strings.HasPrefix(id, "hub-") }); !slices.Equal(edgeHooks, ids) {
			t.Errorf("hub holds the leaf's %d hooks in another order than the leaf's %d:\n%v", len(edgeHooks), len(ids), edgeHooks)
		}
		if f.Status().LastError != "" {
			t.Errorf("last error %q", f.Status().LastError)
		}
		if atomic == strings.Contains(logs.String(), "one hook at a time") {
			t.Errorf("atomic=%v, logs:\n%s", atomic, logs.String())
		}
	})
}

// A hub that refuses hooks (its HOOKS full: MaxMsgs with DiscardNew):
// the outbox keeps every hook it did not store, nothing is acked that the
// hub did not acknowledge, and once it takes hooks again all arrive, in
// order, once each.
func TestHubRefusesHooks(t *testing.T) {
	bothHubs(t, func(t *testing.T, atomic bool) {
		r := newOrderRig(t, atomic)
		r.updateHub(t, func(c *jetstream.StreamConfig) { c.MaxMsgs = 3 })
		ids := r.storeHooks(t, "h", 8, small)
		f := r.start(t, forward.Config{})
		testkit.Eventually(t, 10*time.Second, func() bool { return f.Status().LastError != "" || testkit.Msgs(t, r.outbox) == 0 },
			"a failed forwarding attempt")
		if got := r.hubOrder(t); !slices.Equal(got, ids[:3]) {
			t.Fatalf("the full hub holds %v, want %v", got, ids[:3])
		}
		if n := testkit.Msgs(t, r.outbox); n != 5 {
			t.Fatalf("outbox holds %d hooks, want the 5 the hub refused", n)
		}
		if e := f.Status().LastError; !strings.Contains(e, "h-3") {
			t.Errorf("last error %q does not name the refused hook h-3", e)
		}
		r.updateHub(t, func(c *jetstream.StreamConfig) { c.MaxMsgs = -1 })
		testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, r.outbox) == 0 }, "outbox drained")
		if got := r.hubOrder(t); !slices.Equal(got, ids) {
			t.Errorf("hub order %v, want %v", got, ids)
		}
	})
}
