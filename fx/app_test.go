package fx_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/events"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func post(t *testing.T, h *sluicefx.HTTP, path, key string) int {
	t.Helper()
	code, _ := postRA(t, h, path, key)
	return code
}

// External mode: --nats-url points at an existing server; hooks land there.
func TestExternalNATS(t *testing.T) {
	t.Parallel()
	k := testkit.New(t, testkit.WithListener())
	h, _, _ := start(t, "--nats-url", k.Server.ClientURL(), "--data-dir", t.TempDir())
	if code := post(t, h, "/v1/hooks/t/s", "k1"); code != 202 {
		t.Fatalf("status %d", code)
	}
	st, err := k.JS.Stream(testkit.Context(t), "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := st.Info(testkit.Context(t))
	if info.State.Msgs != 1 {
		t.Fatalf("external server holds %d hooks", info.State.Msgs)
	}
}

// With auth set on the embedded server (its --nats-config), clients must
// present it.
func TestEmbeddedAuthRequired(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	start(t, "--data-dir", t.TempDir(), "--nats-listen", fmt.Sprintf("127.0.0.1:%d", port), "--nats-config", natsConf(t, `authorization { token: "s3cret" }`))
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("unauthenticated connection accepted")
	}
	nc, err := nats.Connect(url, nats.Token("s3cret"))
	if err != nil {
		t.Fatalf("authenticated connection refused: %v", err)
	}
	nc.Close()
}

// Embedded cluster mode: three sluice nodes whose embedded servers form a
// nats-server cluster with R3 buckets and streams; a key claimed through one
// node is a duplicate through another, and every node sees the hook.
func TestEmbeddedCluster(t *testing.T) {
	t.Parallel()
	ports := []int{testkit.FreePort(t), testkit.FreePort(t), testkit.FreePort(t)}
	routes := ""
	for i, p := range ports {
		if i > 0 {
			routes += ","
		}
		routes += fmt.Sprintf("nats-route://127.0.0.1:%d", p)
	}
	nodes := testkit.StartTogether(t, 3, 90*time.Second, "cluster node", func(i int, log *slog.Logger) (*node, error) {
		return startNodeLog(t, log,
			"--data-dir", filepath.Join(t.TempDir(), fmt.Sprint(i)),
			"--nats-listen", "off",
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--routes", routes,
			"--replicas", "3",
		)
	})
	if code := post(t, nodes[0].h, "/v1/hooks/t/s", "shared"); code != 202 {
		t.Fatalf("node 0: %d", code)
	}
	// The first hook's claim is settled asynchronously (the settler):
	// until then another node finds it pending and answers 409 in_flight,
	// which a sender retries (this flaked under load).
	code := 0
	testkit.Eventually(t, 15*time.Second, func() bool {
		code = post(t, nodes[2].h, "/v1/hooks/t/s", "shared")
		return code != http.StatusConflict
	}, "node 2 answers the shared key with something other than 409")
	if code != 200 {
		t.Fatalf("node 2 on the same key: %d, want 200 duplicate", code)
	}
	st, err := nodes[1].n.JS.Stream(testkit.Context(t), "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.State.Msgs != 1 || info.Config.Replicas != 3 {
		t.Fatalf("stream seen from node 1: %+v", info)
	}
	_ = jetstream.ErrKeyExists
}

// Every denial is an event: a hook the edge answers 429
// and a sluice.v1.quota.hit a NATS caller gets answered rate_limited each
// publish exactly one limit.denied.<tenant>, with the kind that denied it
// and the retry-after the caller was given.
func TestLimitDeniedEvents(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	yaml := "allow_unknown: true\ndefaults:\n  limits: {hooks: {rate: 0.01, burst: 2}, bytes: {rate: 1000000000, burst: 1000000000}}\n"
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	h, n, _ := start(t, "--data-dir", dir, "--nats-listen", "off", "--config", filepath.Join(dir, "edge.yaml"))
	type event struct {
		Tenant       string `json:"tenant"`
		Source       string `json:"source"`
		Kind         string `json:"kind"`
		RetryAfterMs int64  `json:"retry_after_ms"`
		Reason       string `json:"reason"`
	}
	ch := make(chan event, 64)
	sub, err := n.Conn.Subscribe("sluice.v1.events.limit.denied.>", func(m *nats.Msg) {
		var e event
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Errorf("event %q: %v", m.Data, err)
		}
		ch <- e
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := n.Conn.Flush(); err != nil {
		t.Fatal(err)
	}

	// The edge path: a burst of 2, then 3 denials.
	var edgeDenials []int64
	for i := range 5 {
		code, ra := postRA(t, h, "/v1/hooks/edget/src", fmt.Sprintf("k%d", i))
		switch {
		case i < 2 && code != 202, i >= 2 && code != 429:
			t.Fatalf("hook %d: status %d", i, code)
		case code == 429:
			edgeDenials = append(edgeDenials, ra)
		}
	}
	// The NATS path: a free-form kind, a burst of 1, then one denial.
	hit := func(tenant string) (result string, retryMs int64) {
		t.Helper()
		req := fmt.Sprintf(`{"charges":[{"kind":"jobs","tenant":%q,"increment_us":3600000000,"capacity_us":3600000000}]}`, tenant)
		m, err := n.Conn.Request("sluice.v1.quota.hit", []byte(req), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var rep struct {
			Result       string `json:"result"`
			RetryAfterMs int64  `json:"retry_after_ms"`
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("quota.hit reply %q: %v", m.Data, err)
		}
		return rep.Result, rep.RetryAfterMs
	}
	if r, _ := hit("natst"); r != "ok" {
		t.Fatalf("first hit: %s", r)
	}
	r, natsRetry := hit("natst")
	if r != "rate_limited" || natsRetry <= 0 {
		t.Fatalf("second hit: %s, retry %d ms", r, natsRetry)
	}
	// A sentinel denial last: one publisher queue per node, in order, so
	// once it arrives every earlier event has.
	hit("sentinel")
	if r, _ := hit("sentinel"); r != "rate_limited" {
		t.Fatalf("sentinel: %s", r)
	}
	var got []event
	timeout := time.After(15 * time.Second)
	for len(got) == 0 || got[len(got)-1].Tenant != "sentinel" {
		select {
		case e := <-ch:
			got = append(got, e)
		case <-timeout:
			t.Fatalf("events so far: %+v", got)
		}
	}
	var edge, viaNATS []event
	for _, e := range got[:len(got)-1] {
		switch e.Tenant {
		case "edget":
			edge = append(edge, e)
		case "natst":
			viaNATS = append(viaNATS, e)
		default:
			t.Errorf("unexpected event %+v", e)
		}
	}
	if len(edge) != len(edgeDenials) {
		t.Fatalf("%d edge denials, %d events: %+v", len(edgeDenials), len(edge), edge)
	}
	for i, e := range edge {
		// Retry-After is whole seconds; the event carries milliseconds.
		if e.Kind != "hooks" || e.Source != "src" || e.Reason != "rate_limited" || e.RetryAfterMs <= 0 || (e.RetryAfterMs+999)/1000 != edgeDenials[i] {
			t.Errorf("edge event %d: %+v, Retry-After %d s", i, e, edgeDenials[i])
		}
	}
	if len(viaNATS) != 1 || viaNATS[0].Kind != "jobs" || viaNATS[0].RetryAfterMs != natsRetry || viaNATS[0].Source != "" {
		t.Fatalf("NATS denial (retry %d ms): events %+v", natsRetry, viaNATS)
	}
}

// postRA posts a hook and returns the status and the Retry-After seconds
// (0 when absent).
func postRA(t *testing.T, h *sluicefx.HTTP, path, key string) (int, int64) {
	t.Helper()
	code := 0
	var ra int64
	testkit.Eventually(t, 15*time.Second, func() bool {
		r := testkit.HTTP(t, http.MethodPost, "http://"+*h.Addr.Load()+path, []byte(`{}`), map[string]string{"Idempotency-Key": key})
		code = r.Code
		ra, _ = strconv.ParseInt(r.Header.Get("Retry-After"), 10, 64)
		// Right after start the store may still be electing leaders.
		return code != http.StatusServiceUnavailable
	}, "an answer other than 503")
	return code, ra
}

// --claim-expiry-events: off (the default) the claims bucket writes no
// expiry markers and no expiry watcher runs; a node started with it on
// turns the markers on in the same bucket and runs the watcher.
func TestClaimExpiryEventsFlag(t *testing.T) {
	t.Parallel()
	k := testkit.New(t, testkit.WithListener())
	ctx := testkit.Context(t)
	stream := "KV_" + kvstore.BucketNames(protocol.DefaultPrefix).Claims
	check := func(markers time.Duration, watcher bool) {
		t.Helper()
		st, err := k.JS.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.CachedInfo().Config.SubjectDeleteMarkerTTL; got != markers {
			t.Fatalf("marker TTL %v, want %v", got, markers)
		}
		_, err = st.Consumer(ctx, events.DefaultExpiryDurable)
		if (err == nil) != watcher {
			t.Fatalf("expiry consumer: %v, want present = %v", err, watcher)
		}
	}
	start(t, "--nats-url", k.Server.ClientURL(), "--data-dir", t.TempDir())
	check(0, false)
	start(t, "--nats-url", k.Server.ClientURL(), "--data-dir", t.TempDir(), "--claim-expiry-events")
	check(time.Second, true)
}

// --claims-persist async creates the claims bucket in async persist mode;
// a node asking for the other mode on that bucket refuses to start, and
// says which flag and what to do.
func TestClaimsPersistAsync(t *testing.T) {
	t.Parallel()
	k := testkit.New(t, testkit.WithListener())
	ctx := testkit.Context(t)
	start(t, "--nats-url", k.Server.ClientURL(), "--data-dir", t.TempDir(), "--claims-persist", "async")
	st, err := k.JS.Stream(ctx, "KV_"+kvstore.BucketNames(protocol.DefaultPrefix).Claims)
	if err != nil {
		t.Fatal(err)
	}
	if m := st.CachedInfo().Config.PersistMode; m != jetstream.AsyncPersistMode {
		t.Fatalf("claims persist mode %v", m)
	}
	// The stores alone on the kit's connection: a whole app failing in a
	// constructor would leave its own connection open (fx runs no stop
	// hooks then).
	cfg, err := config.Parse([]string{"--nats-url", k.Server.ClientURL()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = sluicefx.ProvideStores(fxtest.NewLifecycle(t), cfg, &sluicefx.NATS{Conn: k.Conn, JS: k.JS}, sluicefx.ProvideRegistry(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--claims-persist sync") || !errors.Is(err, kvstore.ErrPersistMode) {
		t.Fatalf("start with sync on an async bucket: %v", err)
	}
}

// TestDeadLetterRaisedWhileNoNodeListens: on an external server, a hook
// terminated while no sluice node runs is a dead letter once a node
// starts: the advisory waited in SLUICE_ADVISORIES.
func TestDeadLetterRaisedWhileNoNodeListens(t *testing.T) {
	t.Parallel()
	k := testkit.New(t, testkit.WithListener())
	ctx := testkit.Context(t)
	const token = "dead-admin-token-0123456789"
	args := []string{"--nats-url", k.Server.ClientURL(), "--data-dir", t.TempDir(), "--admin-token", token}
	hdr := map[string]string{"Authorization": "Bearer " + token}
	first := startNode(t, args...)
	base := "http://" + *first.h.Addr.Load()
	if r := testkit.HTTP(t, "PUT", base+"/v1/admin/consumers/acme/w", []byte(`{"max_deliver":1}`), hdr); r.Code != 201 {
		t.Fatalf("put consumer: %d %s", r.Code, r.Body)
	}
	sub, err := k.Conn.QueueSubscribeSync(protocol.ConsumerDeliverSubject("sluice", "acme", "w"), "w")
	if err != nil {
		t.Fatal(err)
	}
	if r := testkit.HTTP(t, "POST", base+"/v1/hooks/acme/gh", []byte(`{}`), nil); r.Code != 202 {
		t.Fatalf("hook: %d %s", r.Code, r.Body)
	}
	first.stop()
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Term(); err != nil {
		t.Fatal(err)
	}
	adv, err := k.JS.Stream(ctx, "SLUICE_ADVISORIES")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, adv) == 1 }, "the advisory captured with no node up")
	dead, err := k.JS.Stream(ctx, "DEADLETTER")
	if err != nil {
		t.Fatal(err)
	}
	if n := testkit.Msgs(t, dead); n != 0 {
		t.Fatalf("%d dead letters with no node up", n)
	}
	second := startNode(t, args...)
	t.Cleanup(second.stop)
	testkit.Eventually(t, 10*time.Second, func() bool { return testkit.Msgs(t, dead) == 1 }, "the dead letter once a node started")
	letter, err := dead.GetMsg(ctx, 1)
	if err != nil || letter.Header.Get("Sluice-Dead-Reason") != "terminated" || letter.Subject != "sluice.deadletter.acme.w" {
		t.Fatalf("letter: %+v %v", letter, err)
	}
}
