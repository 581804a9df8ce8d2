package forward_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/forward"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// link is a hub and a leaf server joined by a leaf connection, with a
// connection to each.
type link struct {
	hubSrv, edgeSrv *natsembed.Server
	hub, edge       *nats.Conn
	hubJS, edgeJS   jetstream.JetStream
	// sync is the hub's barrier (durability.Serve on hub): each request
	// is answered by syncThen; nil answers at once.
	sync     *durability.Server
	syncThen atomic.Pointer[func(func(error)) func()]
}

// thenFunc is a durability.Barrier that calls its function.
type thenFunc func(fn func(error)) (forget func())

func (f thenFunc) Then(fn func(error)) func() { return f(fn) }

func newLink(t *testing.T) *link {
	t.Helper()
	l := &link{}
	leaf := testkit.FreeAddr(t)
	var err error
	if l.hubSrv, err = natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), JetStreamDomain: "hub", LeafListen: leaf}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.hubSrv.Shutdown)
	deny, imports := hooks.LeafDeny("sluice")
	if l.edgeSrv, err = natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), Name: "e1", JetStreamDomain: "e1",
		LeafRemotes: []string{"nats-leaf://" + leaf}, LeafDeny: deny, LeafDenyImports: imports}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.edgeSrv.Shutdown)
	if l.hub, err = l.hubSrv.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.hub.Close)
	if l.edge, err = l.edgeSrv.Connect(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.edge.Close)
	l.hubJS, _ = jetstream.New(l.hub)
	l.edgeJS, _ = jetstream.New(l.edge)
	if l.sync, err = durability.Serve(l.hub, protocol.HubSyncSubject("sluice"), protocol.HubSyncQueue, thenFunc(func(fn func(error)) func() {
		if then := l.syncThen.Load(); then != nil {
			return (*then)(fn)
		}
		fn(nil)
		return func() {}
	}), durability.HubAnswer{Durability: "synced"}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, l.edgeSrv.LeafConnected, "leaf connected")
	return l
}

// A hook an earlier run may have sent (its sequence is at most the
// consumer's delivered watermark), older than the hub's duplicate window,
// is looked up on the hub: one found there is acked without a publish,
// one missing is published. Either way the hub holds each hook once.
func TestLateResendLooksUpTheHub(t *testing.T) {
	l := newLink(t)
	ctx := testkit.Context(t)
	window := 300 * time.Millisecond
	if _, err := hooks.EnsureStream(ctx, l.hubJS, hooks.StreamConfig{Prefix: "sluice", Duplicates: window}); err != nil {
		t.Fatal(err)
	}
	outbox, err := hooks.EnsureOutbox(ctx, l.edgeJS, hooks.OutboxConfig{Prefix: "sluice"})
	if err != nil {
		t.Fatal(err)
	}
	store := hooks.NewOutboxStore(l.edgeJS, "sluice", "HOOKS")
	sent := []hooks.Hook{
		{ID: "sent-before", Tenant: "t", Source: "s", ReceivedAt: time.Now(), Body: []byte("1")},
		{ID: "never-sent", Tenant: "t", Source: "s", ReceivedAt: time.Now(), Body: []byte("2")},
	}
	for _, h := range sent {
		if _, err := store.Store(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	// The earlier run: its consumer delivered both, the hub stored the
	// first, and the edge died before acking either.
	old, err := outbox.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: forward.Durable, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	b, err := old.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range b.Messages() {
		n++
	}
	if n != 2 {
		t.Fatalf("delivered %d", n)
	}
	m := nats.NewMsg(protocol.HookSubject("sluice", "t", "s"))
	m.Header.Set(hooks.HeaderHookID, "sent-before")
	if _, err := l.hubJS.PublishMsg(ctx, m, jetstream.WithMsgID("sent-before")); err != nil {
		t.Fatal(err)
	}
	stored := time.Now()
	testkit.Eventually(t, 5*time.Second, func() bool { return time.Since(stored) > window+time.Second }, "the hub's duplicate window (and the 1 s margin) passed")

	reg := prometheus.NewRegistry()
	f, err := forward.New(forward.Config{Conn: l.edge, Prefix: "sluice", HubDomain: "hub", Name: "e1",
		Linked: l.edgeSrv.LeafConnected, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Stop(context.Background()) }()
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, outbox) == 0 }, "outbox drained")
	hubStream, err := l.hubJS.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	info := hubStream.CachedInfo() // read by Stream
	if info.State.Msgs != 2 {
		t.Fatalf("hub holds %d hooks, want 2 (each once)", info.State.Msgs)
	}
	for id, want := range map[string]bool{"sent-before": true, "never-sent": true, "nope": false} {
		on, err := f.OnHub(ctx, protocol.HookSubject("sluice", "t", "s"), id, stored.Add(-time.Minute))
		if err != nil || on != want {
			t.Errorf("OnHub(%s) = %v, %v; want %v", id, on, err, want)
		}
	}
	results := testkit.MetricSeries(t, reg, "sluice_edge_forwarded_total")
	// (failed: publishes before the hub's interest reached the leaf, sent again)
	if results["found"] != 1 || results["stored"] != 1 || results["duplicate"] != 0 {
		t.Errorf("forwarded_total: %v, want found=1 stored=1", results)
	}
}

// TestConfigRefusesNegatives: a negative batch, timeout, backoff or TTL is
// ErrInvalidConfig (never silently the default), as is a missing
// connection; nothing is created.
func TestConfigRefusesNegatives(t *testing.T) {
	base := forward.Config{Conn: new(nats.Conn), Linked: func() bool { return true }, Prefix: "sluice", HubDomain: "hub"}
	if err := base.Validate(); err != nil {
		t.Fatalf("zero fields: %v", err)
	}
	for name, edit := range map[string]func(*forward.Config){
		"no connection":     func(c *forward.Config) { c.Conn = nil },
		"batch":             func(c *forward.Config) { c.Batch = -1 },
		"publish timeout":   func(c *forward.Config) { c.PublishTimeout = -time.Second },
		"hub sync fallback": func(c *forward.Config) { c.HubSyncFallback = -time.Second },
		"min backoff":       func(c *forward.Config) { c.MinBackoff = -time.Second },
		"max backoff":       func(c *forward.Config) { c.MaxBackoff = -time.Second },
		"pending TTL":       func(c *forward.Config) { c.PendingTTL = -time.Second },
		"dedupe TTL":        func(c *forward.Config) { c.DedupeTTL = -time.Second },
	} {
		c := base
		edit(&c)
		if _, err := forward.New(c); !errors.Is(err, forward.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}
