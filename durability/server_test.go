package durability_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/protocol"
)

func reply(t *testing.T, m *nats.Msg) protocol.SyncReply {
	t.Helper()
	var r protocol.SyncReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("reply %q: %v", m.Data, err)
	}
	return r
}

// thenFunc is a durability.Barrier that calls its function.
type thenFunc func(fn func(error)) (forget func())

func (f thenFunc) Then(fn func(error)) func() { return f(fn) }

// TestServe: a sync server answers at once without a barrier, with an
// error reply when the round fails, and answers a flood beyond
// SyncMaxWaiting requests waiting for one round with an error at once.
func TestServe(t *testing.T) {
	_, nc, _ := startServer(t, t.TempDir())

	at := func(prefix string) (*nats.Msg, error) {
		return nc.Request(protocol.HubSyncSubject(prefix), nil, 5*time.Second)
	}
	if _, err := durability.Serve(nc, protocol.HubSyncSubject("now"), protocol.HubSyncQueue, nil, durability.HubAnswer{Durability: "sync-always"}); err != nil {
		t.Fatal(err)
	}
	m, err := at("now")
	if err != nil {
		t.Fatal(err)
	}
	var rep protocol.SyncReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || !rep.OK || rep.Durability != "sync-always" {
		t.Errorf("reply %s (%v), want ok at sync-always", m.Data, err)
	}

	if _, err := durability.Serve(nc, protocol.HubSyncSubject("bad"), protocol.HubSyncQueue, thenFunc(func(fn func(error)) func() { fn(errors.New("fsync: EIO")); return func() {} }), durability.HubAnswer{Durability: "synced"}); err != nil {
		t.Fatal(err)
	}
	if m, err = at("bad"); err != nil {
		t.Fatal(err)
	}
	if rep := reply(t, m); rep.OK || rep.Error != "fsync: EIO" {
		t.Errorf("a failed round answered %s, want its error", m.Data)
	}

	// A round that never ends: the requests beyond the bound are refused.
	var mu sync.Mutex
	var waiting []func(error)
	if _, err := durability.Serve(nc, protocol.HubSyncSubject("slow"), protocol.HubSyncQueue, thenFunc(func(fn func(error)) func() {
		mu.Lock()
		waiting = append(waiting, fn)
		mu.Unlock()
		return func() {}
	}), durability.HubAnswer{Durability: "synced"}); err != nil {
		t.Fatal(err)
	}
	inbox := nats.NewInbox()
	replies, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	for range protocol.SyncMaxWaiting + 5 {
		if err := nc.PublishRequest(protocol.HubSyncSubject("slow"), inbox, nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 {
		m, err := replies.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("no refusal of the requests beyond %d waiting: %v", protocol.SyncMaxWaiting, err)
		}
		if rep := reply(t, m); rep.OK || rep.Error == "" {
			t.Fatalf("a request beyond the bound answered %s", m.Data)
		}
	}
	mu.Lock()
	n := len(waiting)
	for _, fn := range waiting {
		fn(nil)
	}
	mu.Unlock()
	if n != protocol.SyncMaxWaiting {
		t.Errorf("%d requests waiting for the round, want %d", n, protocol.SyncMaxWaiting)
	}
}
