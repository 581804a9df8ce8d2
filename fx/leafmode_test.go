package fx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// postHook posts one hook with a dedupe key and returns the status and
// the hook id.
func postHook(t testing.TB, h *sluicefx.HTTP, tenant, key string) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+*h.Addr.Load()+"/v1/hooks/"+tenant+"/src", bytes.NewReader([]byte(`{"k":"`+key+`"}`)))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	defer res.Body.Close()
	var body struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(res.Body).Decode(&body)
	return res.StatusCode, body.ID
}

// postMany posts n hooks over 8 tenants from 16 goroutines as a sender
// does: a 503 (store_unavailable: the hook was not stored, the contract's
// answer when the store cannot answer in time) or a 409 (in flight) is
// tried again with the same key, up to 20 times; it returns the hook ids
// answered 202, or 200 for a retry whose first try was stored. A hook
// never answered 2xx fails the test, and so do more 503s than a tenth of
// the hooks: a node that sheds that much is not serving its outbox.
func postMany(t *testing.T, h *sluicefx.HTTP, round string, n int) []string {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	var retried atomic.Int64
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				key := fmt.Sprintf("%s-%d", round, i)
				var code int
				var id string
				for try := 0; try < 20; try++ {
					code, id = postHook(t, h, fmt.Sprintf("t%d", i%8), key)
					if code != http.StatusServiceUnavailable && code != http.StatusConflict {
						break
					}
					retried.Add(1)
					time.Sleep(time.Duration(try+1) * 10 * time.Millisecond) // a sender's backoff, not a wait for a condition
				}
				if code != http.StatusAccepted && code != http.StatusOK || id == "" {
					t.Errorf("%s hook %d: status %d, id %q", round, i, code, id)
					continue
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if r := retried.Load(); r > int64(n/10) {
		t.Errorf("%s: %d of %d hooks answered 503 or 409 and were sent again", round, r, n)
	} else if r > 0 {
		t.Logf("%s: %d of %d hooks sent again after a 503 or 409", round, r, n)
	}
	return ids
}

// hubHooks counts the hub's stored hooks by hook id.
func hubHooks(t testing.TB, js jetstream.JetStream) map[string]int {
	t.Helper()
	seen, err := readHubHooks(testkit.Context(t), js)
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

// readHubHooks is hubHooks returning its error.
func readHubHooks(ctx context.Context, js jetstream.JetStream) (map[string]int, error) {
	seen := map[string]int{}
	order, err := readHubOrder(ctx, js)
	for _, id := range order {
		seen[id]++
	}
	return seen, err
}

// readHubOrder is the hook ids in the hub's HOOKS in stream order.
func readHubOrder(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	st, err := js.Stream(ctx, "HOOKS")
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	var order []string
	if info.State.Msgs == 0 {
		return order, nil
	}
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: true})
	if err != nil {
		return nil, err
	}
	for got := uint64(0); got < info.State.Msgs; {
		b, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range b.Messages() {
			order = append(order, m.Headers().Get(hooks.HeaderHookID))
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("hub HOOKS: read %d of %d messages", got, info.State.Msgs)
		}
		got += uint64(n)
	}
	return order, nil
}

// outboxOrder is the hook ids in a leaf's outbox in its order (read by
// sequence: the outbox is a work queue, its consumer the forwarder's).
func outboxOrder(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	st, err := js.Stream(testkit.Context(t), hooks.OutboxStream("HOOKS"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range testkit.StoredMsgs(t, st) {
		ids = append(ids, m.Header.Get(hooks.HeaderHookID))
	}
	return ids
}

// Leaf mode: a leaf keeps answering 202 from its local outbox
// while the hub is stopped, survives an abrupt stop of its own server
// during the outage, and once the hub is back every acked hook reaches the
// hub's HOOKS exactly once.
func TestLeafModeHubOutage(t *testing.T) {
	t.Parallel()
	hubDir, edgeDir := t.TempDir(), t.TempDir()
	leaf := testkit.FreeAddr(t)
	// A store budget of 1 s, not 250 ms: this test is about the outbox,
	// and on a loaded CI machine (2 cores, the other packages' tests
	// beside it) 250 ms calls ran out, leaving pending claims whose keys
	// answered 409 past the sender's retries.
	hubArgs := []string{"--data-dir", hubDir, "--leaf-listen", leaf, "--store-timeout", "1s"}
	edgeArgs := []string{"--data-dir", edgeDir, "--hub-url", "nats-leaf://" + leaf, "--leaf-name", "e1", "--store-timeout", "1s"}

	hub := startNode(t, hubArgs...)
	ed := startNode(t, edgeArgs...)
	testkit.Eventually(t, 10*time.Second, ed.n.Server.LeafConnected, "edge linked to the hub")

	acked := postMany(t, ed.h, "up", 200)

	// The hub goes away under load: every hook is still 202.
	hub.stop()
	testkit.Eventually(t, 10*time.Second, func() bool { return !ed.n.Server.LeafConnected() }, "link down")
	acked = append(acked, postMany(t, ed.h, "down", 300)...)

	// The edge's server stops without a graceful drain (and its
	// connection with it: nothing is flushed), then the edge restarts on
	// the same data dir, still without its hub.
	ed.n.Server.NATS().Shutdown()
	ed.n.Conn.Close()
	ed.stop()
	ed = startNode(t, edgeArgs...)
	acked = append(acked, postMany(t, ed.h, "after-kill", 100)...)
	// Operators see the outage: /readyz stays ready and shows the link and
	// the backlog; so do the metrics.
	testkit.Eventually(t, 5*time.Second, func() bool {
		code, body := getBody(t, ed.h, "/readyz")
		return code == 200 && strings.Contains(body, `"hub_linked":false`) && backlogOf(body) >= 400
	}, "readyz: ready, unlinked, a backlog of at least the 400 hooks acked during the outage")
	_, metrics := getBody(t, ed.h, "/metrics")
	for _, want := range []string{"sluice_edge_hub_linked 0", "sluice_edge_outbox_oldest_age_seconds "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^sluice_edge_outbox_messages [1-9][0-9]{2}$`).MatchString(metrics) {
		t.Errorf("metrics: no outbox backlog in the hundreds:\n%s", grepLines(metrics, "sluice_edge_outbox"))
	}
	// The order the edge stored the outage's hooks in (nothing is
	// forwarded while unlinked).
	stored := outboxOrder(t, ed.n.JS)
	if len(stored) < 400 {
		t.Fatalf("outbox holds %d hooks, want the 400 of the outage", len(stored))
	}

	// The hub comes back: the backlog drains, none lost, none twice.
	t0 := time.Now()
	hub = startNode(t, hubArgs...)
	waitOutboxDrained(t, ed, 20*time.Second)
	t.Logf("%d hooks acked; hub restart to empty outbox: %s", len(acked), time.Since(t0))
	testkit.Eventually(t, 5*time.Second, func() bool {
		code, body := getBody(t, ed.h, "/readyz")
		return code == 200 && strings.Contains(body, `"hub_linked":true`) && backlogOf(body) == 0
	}, "readyz: linked, no backlog")
	seen := hubHooks(t, hub.n.JS)
	for _, id := range acked {
		if seen[id] != 1 {
			t.Errorf("hook %s stored %d times on the hub", id, seen[id])
		}
	}
	if len(seen) != len(acked) {
		t.Errorf("hub holds %d hooks, %d were acked", len(seen), len(acked))
	}
	// And in the hub's HOOKS they are in the edge's order.
	order, err := readHubOrder(testkit.Context(t), hub.n.JS)
	if err != nil {
		t.Fatal(err)
	}
	inOutbox := map[string]bool{}
	for _, id := range stored {
		inOutbox[id] = true
	}
	order = slices.DeleteFunc(order, func(id string) bool { return !inOutbox[id] })
	if !slices.Equal(order, stored) {
		t.Errorf("the hub's HOOKS holds the outage's %d hooks in another order than the edge stored them (%d)", len(order), len(stored))
	}
}

// What crosses a leaf's connection to its hub (hooks.LeafDeny): only the hub's
// hooks subjects from the edge, and inbox replies; not the owners,
// service, events, consumer acks or the outbox, and no hooks from the hub.
func TestLeafIsolation(t *testing.T) {
	t.Parallel()
	leaf := testkit.FreeAddr(t)
	hubSrv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), JetStreamDomain: "hub", LeafListen: leaf, LeafToken: "leaf-secret-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hubSrv.Shutdown)
	deny, imports := hooks.LeafDeny("sluice")
	edgeSrv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), Name: "e1", JetStreamDomain: "e1",
		LeafRemotes: []string{"nats-leaf://" + leaf}, LeafToken: "leaf-secret-0123456789", LeafDeny: deny, LeafDenyImports: imports})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(edgeSrv.Shutdown)
	testkit.Eventually(t, 10*time.Second, edgeSrv.LeafConnected, "leaf connected")
	hub, err := hubSrv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	ed, err := edgeSrv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer ed.Close()

	// The hub listens on every subject with one subscription, which gets
	// what crosses in the order the edge published it: after the denied
	// subjects the edge publishes a hooks message, so a denied one that
	// crossed arrives before it — "not seen before the sentinel" is exact.
	crossed, err := hub.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := hub.Flush(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		_ = ed.Publish("sluice.hooks.mark", nil)
		m, err := crossed.NextMsg(50 * time.Millisecond)
		return err == nil && m.Subject == "sluice.hooks.mark"
	}, "the hub's interest reaches the edge")
	denied := []string{"sluice.v1.quota.p.0", "$JS.ACK.sluice_events.settler.1.1.1.1.0", "$SRV.PING", "sluice.outbox.t.s", "$KV.sluice_claims.k", "sluice.node.v1.sync"}
	for _, subj := range denied {
		_ = ed.Publish(subj, nil)
	}
	_ = ed.Publish("sluice.hooks.t.s", nil)
	if err := ed.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := crossed.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("sluice.hooks.t.s did not reach the hub: %v", err)
		}
		if m.Subject == "sluice.hooks.t.s" {
			break
		}
		if slices.Contains(denied, m.Subject) {
			t.Fatalf("%s crossed the leaf connection to the hub", m.Subject)
		}
	}
	_ = crossed.Unsubscribe()

	// Nothing from the hub's hooks subjects reaches the edge; replies do. A
	// hooks message from the hub that crossed would reach the edge's
	// connection before the request the hub sends after it (one leaf
	// connection, in order), so once the request is answered it would be
	// pending on fromHub.
	fromHub, err := ed.SubscribeSync("sluice.hooks.>")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ed.Subscribe("edge.echo", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := ed.Flush(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		_, err := hub.Request("edge.echo", nil, 100*time.Millisecond)
		return err == nil
	}, "a request from the hub answered by the edge")
	_ = hub.Publish("sluice.hooks.t.s", nil)
	if _, err := hub.Request("edge.echo", nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := fromHub.Pending(); n != 0 {
		m, _ := fromHub.NextMsg(0)
		t.Fatalf("%s crossed the leaf connection to the edge", m.Subject)
	}
	// Each side's JetStream API is reachable from the other by its domain
	// (docs/LEAF-MODE.md: nats --js-domain e1 stream info HOOKS_OUTBOX on the hub).
	for name, js := range map[string]func() (jetstream.JetStream, error){
		"the edge's from the hub": func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(hub, "e1") },
		"the hub's from the edge": func() (jetstream.JetStream, error) { return jetstream.NewWithDomain(ed, "hub") },
	} {
		j, err := js()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.AccountInfo(testkit.Context(t)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// getBody GETs path from h: the status and the body.
func getBody(t *testing.T, h *sluicefx.HTTP, path string) (int, string) {
	t.Helper()
	r := testkit.HTTP(t, http.MethodGet, "http://"+*h.Addr.Load()+path, nil, nil)
	return r.Code, string(r.Body)
}

// backlogOf is the edge backlog a /readyz body reports (-1: none).
func backlogOf(body string) int {
	var r struct {
		Edge *struct {
			Backlog int `json:"backlog"`
		} `json:"leaf"`
	}
	if json.Unmarshal([]byte(body), &r) != nil || r.Edge == nil {
		return -1
	}
	return r.Edge.Backlog
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Claims across the link: while linked, the edge takes
// claims in the hub's bucket (a key accepted at the edge is a duplicate at
// the hub); a key accepted at the hub and, while the hub was away, at the
// edge is reported when the edge forwards its hook (claim.split event,
// sluice_edge_split_keys_total), and both hooks are kept.
func TestLeafModeSplitKey(t *testing.T) {
	t.Parallel()
	leaf := testkit.FreeAddr(t)
	hubArgs := []string{"--data-dir", t.TempDir(), "--leaf-listen", leaf}
	edgeArgs := []string{"--data-dir", t.TempDir(), "--hub-url", "nats-leaf://" + leaf, "--leaf-name", "e1"}
	hub := startNode(t, hubArgs...)

	// The hub accepts "split" itself, then goes away.
	code, hubID := postHook(t, hub.h, "acme", "split")
	if code != http.StatusAccepted {
		t.Fatalf("hub: %d", code)
	}
	hub.stop()

	ed := startNode(t, edgeArgs...)
	splits := make(chan *nats.Msg, 4)
	sub, err := ed.n.Conn.ChanSubscribe("sluice.v1.events.claim.split.>", splits)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	code, edgeID := postHook(t, ed.h, "acme", "split")
	if code != http.StatusAccepted || edgeID == hubID {
		t.Fatalf("edge without its hub: %d %s (hub's %s)", code, edgeID, hubID)
	}

	hub = startNode(t, hubArgs...)
	testkit.Eventually(t, 10*time.Second, ed.n.Server.LeafConnected, "linked")
	select {
	case m := <-splits:
		var ev struct {
			Key  string `json:"key"`
			Hook string `json:"hook_id"`
			Hub  string `json:"hub_hook_id"`
		}
		if err := json.Unmarshal(m.Data, &ev); err != nil {
			t.Fatal(err)
		}
		if m.Subject != "sluice.v1.events.claim.split.acme" || ev.Key != "split" || ev.Hook != edgeID || ev.Hub != hubID {
			t.Fatalf("split event %s %s", m.Subject, m.Data)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no claim.split event")
	}
	_, metrics := getBody(t, ed.h, "/metrics")
	if !strings.Contains(metrics, "sluice_edge_split_keys_total 1") {
		t.Errorf("metrics: %s", grepLines(metrics, "split"))
	}
	seen := hubHooks(t, hub.n.JS)
	if seen[hubID] != 1 || seen[edgeID] != 1 {
		t.Errorf("hub holds %v; want the hub's %s and the edge's %s once each", seen, hubID, edgeID)
	}

	// Linked: a key the edge accepts is held in the hub's bucket, not the
	// edge's.
	code, id := postHook(t, ed.h, "acme", "linked")
	if code != http.StatusAccepted {
		t.Fatalf("edge: %d", code)
	}
	kv, err := ed.n.JS.KeyValue(testkit.Context(t), "sluice_claims")
	if err != nil {
		t.Fatal(err)
	}
	key := claims.KVKey(claims.ID{Tenant: "acme", Source: "src", Key: "linked"})
	if _, err := kv.Get(testkit.Context(t), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the edge's own bucket holds the linked key: %v", err)
	}
	if _, err := kv.Get(testkit.Context(t), claims.KVKey(claims.ID{Tenant: "acme", Source: "src", Key: "split"})); err != nil {
		t.Fatalf("the edge's own bucket lacks the key it took unlinked: %v", err)
	}
	code, dup := postHook(t, hub.h, "acme", "linked")
	if code != http.StatusOK || dup != id {
		t.Fatalf("hub after the edge accepted the key: %d %s, want 200 %s", code, dup, id)
	}
}

// The leaf connection with mutual TLS and the token: a leaf presenting a
// certificate the hub's CA signed, verifying the hub with it, connects;
// one without a certificate, or with the wrong token, does not.
func TestLeafTLS(t *testing.T) {
	t.Parallel()
	pki := testkit.NewPKI(t)
	hubCert, hubKey := pki.Issue("hub")
	edgeCert, edgeKey := pki.Issue("edge")
	leaf := testkit.FreeAddr(t)
	token := "leaf-secret-0123456789"
	hub, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), JetStreamDomain: "hub", LeafListen: leaf, LeafToken: token,
		LeafTLSCert: hubCert, LeafTLSKey: hubKey, LeafTLSCA: pki.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Shutdown)
	startEdge := func(name, tok, cert, key string) (*natsembed.Server, *testkit.LogBuffer) {
		t.Helper()
		logs := &testkit.LogBuffer{}
		s, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), Name: name, JetStreamDomain: name,
			LeafRemotes: []string{"tls://" + leaf}, LeafToken: tok, LeafTLSCA: pki.CAFile, LeafTLSCert: cert, LeafTLSKey: key,
			LeafReconnect: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Shutdown)
		return s, logs
	}
	noCert, noCertLog := startEdge("nocert", token, "", "")
	badToken, badTokenLog := startEdge("badtoken", "wrong-secret-0123456789", edgeCert, edgeKey)
	good, _ := startEdge("good", token, edgeCert, edgeKey)
	testkit.Eventually(t, 10*time.Second, good.LeafConnected, "the edge with a certificate and the token connected")
	testkit.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(noCertLog.String(), "Leafnode connection closed") && strings.Contains(badTokenLog.String(), "Authorization Violation")
	}, "the other leaves tried and were refused")
	if noCert.LeafConnected() || badToken.LeafConnected() || hub.NATS().NumLeafNodes() != 1 {
		t.Fatalf("without a certificate: %v, wrong token: %v, hub's leaf connections: %d",
			noCert.LeafConnected(), badToken.LeafConnected(), hub.NATS().NumLeafNodes())
	}
}

// A hub serves its leaves' sync barrier (protocol.HubSyncSubject) across the
// leaf connection: at synced with a round of its group sync, at
// sync-always at once (its acks already mean on disk). A leaf does not
// serve it itself: with its hub gone, nothing answers it there.
func TestLeafHubSync(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"synced", "sync-always"} {
		t.Run(level, func(t *testing.T) {
			leaf := testkit.FreeAddr(t)
			hub := startNode(t, "--data-dir", t.TempDir(), "--leaf-listen", leaf, "--durability", level)
			ed := startNode(t, "--data-dir", t.TempDir(), "--hub-url", "nats-leaf://"+leaf, "--leaf-name", "e1")
			testkit.Eventually(t, 10*time.Second, ed.n.Server.LeafConnected, "edge linked to the hub")
			ask := func() (*nats.Msg, error) {
				return ed.n.Conn.Request(protocol.HubSyncSubject("sluice"), nil, 5*time.Second)
			}
			waits := hub.n.Group.Stats().Waits
			var m *nats.Msg
			testkit.Eventually(t, 10*time.Second, func() bool {
				var err error
				m, err = ask()
				return err == nil
			}, "the hub's barrier reachable from the edge")
			var rep protocol.SyncReply
			if err := json.Unmarshal(m.Data, &rep); err != nil || !rep.OK || rep.Durability != level {
				t.Fatalf("the hub answered %q (%v), want ok at %s", m.Data, err, level)
			}
			joined := hub.n.Group.Stats().Waits - waits
			if level == "synced" && joined == 0 {
				t.Error("the hub answered the barrier without a round of its group sync")
			}
			if level == "sync-always" && joined != 0 {
				t.Errorf("a sync-always hub ran %d group sync waits for the barrier: its acks are already durable", joined)
			}
			hub.stop()
			testkit.Eventually(t, 10*time.Second, func() bool { return !ed.n.Server.LeafConnected() }, "link down")
			if _, err := ask(); !errors.Is(err, nats.ErrNoResponders) {
				t.Errorf("the barrier on a leaf cut off from its hub: %v, want no responders (a leaf never serves it)", err)
			}
		})
	}
}

// TestLeafModeFromNATSConfig: a hub's leaf authorization and a leaf's
// remote come from their --nats-config files: a leaf whose remote names
// the file's user and password links and forwards its hooks to the hub;
// one with a wrong password never links.
func TestLeafModeFromNATSConfig(t *testing.T) {
	t.Parallel()
	leaf := testkit.FreeAddr(t)
	// A store budget of 1 s, as TestLeafModeHubOutage's: this test is about
	// the config files, and 250 ms calls that ran out on a loaded machine
	// (a fresh-clone CI run) left pending claims on the hub whose keys
	// answered 409 past the sender's retries.
	hub := startNode(t, "--data-dir", t.TempDir(), "--leaf-listen", leaf, "--store-timeout", "1s",
		"--nats-config", natsConf(t, `leafnodes { authorization { user: sluice-leaf, password: "leaf-secret-0123456789" } }`))
	remote := func(password string) string {
		return natsConf(t, fmt.Sprintf(`leafnodes { remotes: [ { url: "nats-leaf://sluice-leaf:%s@%s" } ] }`, password, leaf))
	}
	ed := startNode(t, "--data-dir", t.TempDir(), "--leaf-name", "e1", "--store-timeout", "1s", "--nats-config", remote("leaf-secret-0123456789"))
	testkit.Eventually(t, 10*time.Second, ed.n.Server.LeafConnected, "edge linked to the hub")
	acked := postMany(t, ed.h, "file", 5)
	waitOutboxDrained(t, ed, 20*time.Second)
	if got := hubHooks(t, hub.n.JS); len(got) != len(acked) {
		t.Fatalf("the hub holds %d hooks, want the edge's %d", len(got), len(acked))
	}
	bad := startNode(t, "--data-dir", t.TempDir(), "--leaf-name", "e2", "--nats-config", remote("wrong-password-0123456"))
	time.Sleep(2 * time.Second)
	if bad.n.Server.LeafConnected() {
		t.Fatal("a leaf with a wrong leaf password linked to the hub")
	}
}

// TestLeafHasNoManagedConsumers: a leaf keeps its hooks in an outbox
// until the hub has them, so its admin API refuses managed consumers
// (404, naming the hub) rather than making one on the outbox; nor does it
// serve dead letters.
func TestLeafHasNoManagedConsumers(t *testing.T) {
	ed := startNode(t, "--data-dir", t.TempDir(), "--hub-url", "nats-leaf://127.0.0.1:"+strconv.Itoa(testkit.FreePort(t)), "--leaf-name", "e1",
		"--admin-token", "edge-admin-token-0123456789")
	t.Cleanup(ed.stop)
	base := "http://" + *ed.h.Addr.Load() + "/v1/admin/consumers/acme"
	hdr := map[string]string{"Authorization": "Bearer edge-admin-token-0123456789"}
	for _, c := range []struct{ method, url string }{{"PUT", base + "/w"}, {"GET", base}, {"GET", base + "/w/dead"}} {
		r := testkit.HTTP(t, c.method, c.url, []byte(`{}`), hdr)
		if r.Code != 404 || (c.url != base+"/w/dead" && !strings.Contains(string(r.Body), "manage consumers on the hub")) {
			t.Errorf("%s %s on a leaf: %d %s", c.method, c.url, r.Code, r.Body)
		}
	}
}
