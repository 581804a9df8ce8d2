package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/durability"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// consumersYAML: two tenants and a reader (consumer role) of each.
const consumersYAML = `
tenants:
  acme:
    sources:
      gh:  {dedupe: none}
      raw: {dedupe: none}
  globex:
    sources:
      gh: {dedupe: none}
nats_users:
  acme-reader: {role: consumer, tenants: [acme], password: "acme-reader-password-01"}
  globex-reader: {role: consumer, tenants: [globex], password: "globex-reader-password-1"}
`

// startRoles starts a node with consumersYAML's roles on a NATS listener
// and the admin API; it returns the app and the listener's URL.
func startRoles(t *testing.T) (*app, string) {
	t.Helper()
	port := testkit.FreePort(t)
	a := startApp(t, consumersYAML, "--admin-token", adminToken, "--nats-listen", fmt.Sprintf("127.0.0.1:%d", port))
	return a, fmt.Sprintf("nats://127.0.0.1:%d", port)
}

// reader connects as a consumer-role user, as docs/SECURITY.md says: its
// own inbox prefix; the server's permission errors are kept for LastError.
func reader(t *testing.T, url, user, pass string) *nats.Conn {
	t.Helper()
	return testkit.Dial(t, url, nats.UserInfo(user, pass), nats.CustomInboxPrefix(authz.InboxPrefix(user)),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
}

// violated reports whether the server refused op on subj to nc (the -ERR
// comes before the flush's PONG, so LastError holds it after Flush).
func violated(t *testing.T, nc *nats.Conn, subj string, op func() error) bool {
	t.Helper()
	if err := op(); err != nil {
		t.Fatalf("%s: %v", subj, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	err := nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("%q", subj))
}

// consumerOf decodes a managed consumer reply.
func consumerOf(t *testing.T, r resp) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.raw), &m); err != nil {
		t.Fatalf("%s: %v", r.raw, err)
	}
	return m
}

// TestManagedConsumersUnderRoles: the operator (admin API) keeps two named
// consumers of acme and one of globex; each tenant's reader (the consumer
// role of the node's nats_users) receives and acks its tenant's hooks on
// every one of its consumers, whatever their names, and is refused the
// other tenant's: neither its deliveries nor acking them.
func TestManagedConsumersUnderRoles(t *testing.T) {
	t.Parallel()
	a, url := startRoles(t)
	put := func(tenant, name, body string, code int) map[string]any {
		t.Helper()
		r := a.admin("PUT", "/v1/admin/consumers/"+tenant+"/"+name, adminToken, body)
		mustStatus(t, r, code)
		return consumerOf(t, r)
	}
	gh := put("acme", "gh-worker", `{"sources":["gh"],"max_deliver":2,"ack_wait_ms":60000}`, 201)
	all := put("acme", "all", `{}`, 201)
	gx := put("globex", "worker", `{"max_in_flight":8}`, 201)
	if gh["consumer"] != "acme~gh-worker" || gh["deliver_subject"] != "sluice.redeliver.acme.consumer.gh-worker" || gh["deliver_group"] != "gh-worker" {
		t.Fatalf("acme/gh-worker: %v", gh)
	}
	// Edit: a PUT of an existing name replaces its settings (200).
	// With a backoff the ack wait is its first step (JetStream's rule): an
	// ack_wait_ms equal to it is kept (a GET's settings PUT again), another
	// refused above (TestManagedConsumerBadInput).
	if m := put("acme", "gh-worker", `{"sources":["gh"],"max_deliver":3,"ack_wait_ms":1000,"backoff_ms":[1000,2000]}`, 200); m["max_deliver"] != float64(3) || fmt.Sprint(m["backoff_ms"]) != "[1000 2000]" || m["ack_wait_ms"] != float64(1000) {
		t.Fatalf("edited: %v", m)
	}
	r := a.admin("GET", "/v1/admin/consumers/acme", adminToken, "")
	mustStatus(t, r, 200)
	var list struct {
		Consumers []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(r.raw), &list); err != nil || len(list.Consumers) != 2 || list.Consumers[0].Name != "all" || list.Consumers[1].Name != "gh-worker" {
		t.Fatalf("acme's consumers: %s", r.raw)
	}

	acme := reader(t, url, "acme-reader", "acme-reader-password-01")
	globex := reader(t, url, "globex-reader", "globex-reader-password-1")
	sub := func(nc *nats.Conn, c map[string]any) *nats.Subscription {
		t.Helper()
		s, err := nc.QueueSubscribeSync(c["deliver_subject"].(string), c["deliver_group"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil || nc.LastError() != nil {
			t.Fatalf("subscribe %s: %v %v", c["deliver_subject"], err, nc.LastError())
		}
		return s
	}
	ghSub, allSub, gxSub := sub(acme, gh), sub(acme, all), sub(globex, gx)
	mustStatus(t, a.post("/v1/hooks/acme/gh", []byte(`{"n":1}`), nil), 202)
	mustStatus(t, a.post("/v1/hooks/acme/raw", []byte(`{"n":2}`), nil), 202)
	mustStatus(t, a.post("/v1/hooks/globex/gh", []byte(`{"n":3}`), nil), 202)
	next := func(s *nats.Subscription, want string) *nats.Msg {
		t.Helper()
		m, err := s.NextMsg(10 * time.Second)
		if err != nil || string(m.Data) != want {
			t.Fatalf("%s: %v %v, want %s", s.Subject, m, err, want)
		}
		return m
	}
	for _, m := range []*nats.Msg{next(ghSub, `{"n":1}`), next(allSub, `{"n":1}`), next(allSub, `{"n":2}`)} {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	gxMsg := next(gxSub, `{"n":3}`)

	// acme's reader: refused globex's deliveries and acking them.
	if !violated(t, acme, gx["deliver_subject"].(string), func() error { _, err := acme.SubscribeSync(gx["deliver_subject"].(string)); return err }) {
		t.Error("acme's reader subscribed to globex's consumer")
	}
	if !violated(t, acme, gxMsg.Reply, func() error { return acme.Publish(gxMsg.Reply, []byte("+ACK")) }) {
		t.Error("acme's reader acked globex's hook")
	}
	if !violated(t, globex, gh["deliver_subject"].(string), func() error { _, err := globex.SubscribeSync(gh["deliver_subject"].(string)); return err }) {
		t.Error("globex's reader subscribed to acme's consumer")
	}
	state := func(tenant, name string) map[string]any {
		t.Helper()
		r := a.admin("GET", "/v1/admin/consumers/"+tenant+"/"+name, adminToken, "")
		mustStatus(t, r, 200)
		return consumerOf(t, r)
	}
	if s := state("globex", "worker"); s["num_ack_pending"] != float64(1) {
		t.Fatalf("globex's hook after acme's reader's ack: %v", s)
	}
	// The lag on /metrics (the first scrape reads JetStream): globex's
	// hook delivered, unacked, and its age.
	if l := testkit.ScrapeLine(t, a.url, `sluice_consumer_ack_pending{consumer="worker",tenant="globex"}`); l == "" || !strings.HasSuffix(l, " 1") {
		t.Fatalf("ack pending of globex/worker on /metrics: %q", l)
	}
	if l := testkit.ScrapeLine(t, a.url, `sluice_consumer_oldest_unacked_age_seconds{consumer="worker",tenant="globex"}`); l == "" || strings.HasSuffix(l, " 0") {
		t.Fatalf("oldest unacked age of globex/worker on /metrics: %q", l)
	}
	if l := testkit.ScrapeLine(t, a.url, `sluice_consumer_pending{consumer="gh-worker",tenant="acme"}`); !strings.HasSuffix(l, " 0") {
		t.Fatalf("pending of acme/gh-worker on /metrics: %q", l)
	}
	if err := gxMsg.Ack(); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"acme", "gh-worker"}, {"acme", "all"}, {"globex", "worker"}} {
		testkit.Eventually(t, 10*time.Second, func() bool {
			s := state(c[0], c[1])
			return s["num_ack_pending"] == float64(0) && s["num_pending"] == float64(0)
		}, c[0]+"/"+c[1]+" acked")
	}

	mustStatus(t, a.admin("DELETE", "/v1/admin/consumers/acme/all", adminToken, ""), 204)
	if r := a.admin("GET", "/v1/admin/consumers/acme/all", adminToken, ""); r.code != 404 || r.body["error"] != protocol.ConsumerNotFound.Code {
		t.Fatalf("deleted consumer: %d %s", r.code, r.raw)
	}
}

// TestManagedConsumerBadInput: names, tenants and settings an attacker
// (or a typo) sends are answered 4xx, and never reach another tenant's
// consumer.
func TestManagedConsumerBadInput(t *testing.T) {
	t.Parallel()
	a := startApp(t, rewindYAML, "--admin-token", adminToken)
	mustStatus(t, a.admin("PUT", "/v1/admin/consumers/acme/w", adminToken, `{}`), 201)
	for _, c := range []struct {
		method, path, body string
		code               int
		errCode            string
	}{
		{"PUT", "/v1/admin/consumers/acme/a.b", `{}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/a~b", `{}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/%2A", `{}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/%3E", `{}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/" + strings.Repeat("x", 65), `{}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/a%2A/w", `{}`, 400, "invalid_tenant"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"max_deliver":-1}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"max_deliver":1001}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"ack_wait_ms":10}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"ack_wait_ms":3600001}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"backoff_ms":[1000]}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"max_deliver":2,"backoff_ms":[1000,1000]}`, 400, "invalid_request"},
		// JetStream would make the ack wait the first step without a word.
		{"PUT", "/v1/admin/consumers/acme/w", `{"max_deliver":3,"ack_wait_ms":2000,"backoff_ms":[1000,2000]}`, 400, "invalid_request"},
		// A tenant the node refuses hooks of, as hooks are (404), and
		// nothing created: the GET after it is consumer_not_found.
		{"PUT", "/v1/admin/consumers/nosuch-tenant/w", `{}`, 404, "unknown_tenant"},
		{"GET", "/v1/admin/consumers/nosuch-tenant/w", ``, 404, "consumer_not_found"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"max_in_flight":1025}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"types":["push"]}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"sources":["a b"]}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"sources":["*"]}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"bogus":1}`, 400, "invalid_request"},
		{"PUT", "/v1/admin/consumers/acme/w", `{"sources":["` + strings.Repeat("s", 1<<17) + `"]}`, 400, "invalid_request"},
		{"GET", "/v1/admin/consumers/globex/w", ``, 404, "consumer_not_found"},
		{"DELETE", "/v1/admin/consumers/globex/w", ``, 404, "consumer_not_found"},
		{"GET", "/v1/admin/consumers/acme/nope", ``, 404, "consumer_not_found"},
	} {
		if r := a.admin(c.method, c.path, adminToken, c.body); r.code != c.code || r.body["error"] != c.errCode {
			t.Errorf("%s %.80s %.80s: %d %.200s, want %d %s", c.method, c.path, c.body, r.code, r.raw, c.code, c.errCode)
		}
	}
	// Concurrent creates of one name with different settings: one 201,
	// the others 200 (replaced it after) or 409 consumer_exists (raced
	// it), never a 5xx. (Identical settings would all be 201: JetStream's
	// create is idempotent for an identical consumer.)
	codes := make(chan int, 8)
	for i := range 8 {
		go func() {
			codes <- a.admin("PUT", "/v1/admin/consumers/globex/race", adminToken, fmt.Sprintf(`{"max_deliver":%d}`, i+1)).code
		}()
	}
	created := 0
	for range 8 {
		switch c := <-codes; c {
		case 201:
			created++
		case 200, 409:
		default:
			t.Errorf("a concurrent create: %d", c)
		}
	}
	if created != 1 {
		t.Errorf("%d concurrent creates answered 201, want 1", created)
	}
	mustStatus(t, a.admin("DELETE", "/v1/admin/consumers/globex/race", adminToken, ""), 204)
	// Without the token: 401, and nothing listed for another tenant.
	mustStatus(t, a.admin("GET", "/v1/admin/consumers/acme", "", ""), 401)
	if r := a.admin("GET", "/v1/admin/consumers/globex", adminToken, ""); r.code != 200 || !strings.Contains(r.raw, `"consumers":[]`) {
		t.Fatalf("globex lists: %d %s", r.code, r.raw)
	}
	// At most MaxTenantConsumers per tenant.
	for i := 1; i < 16; i++ {
		mustStatus(t, a.admin("PUT", fmt.Sprintf("/v1/admin/consumers/acme/w%d", i), adminToken, `{}`), 201)
	}
	if r := a.admin("PUT", "/v1/admin/consumers/acme/w16", adminToken, `{}`); r.code != 409 || r.body["error"] != "too_many_consumers" {
		t.Fatalf("17th consumer: %d %s", r.code, r.raw)
	}
	mustStatus(t, a.admin("PUT", "/v1/admin/consumers/globex/w", adminToken, `{}`), 201)
}

// TestDeadLetters: acme's reader naks a hook until its consumer's
// max_deliver is spent and terminates another; both are kept in
// DEADLETTER with the reason, the consumer and the deliveries, counted in
// sluice_dead_letters_total; one is redriven (its reader gets it again),
// the other purged. Another tenant's path never shows acme's letters.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	a, url := startRoles(t)
	mustStatus(t, a.admin("PUT", "/v1/admin/consumers/acme/dl", adminToken, `{"max_deliver":2,"ack_wait_ms":1000}`), 201)
	mustStatus(t, a.admin("PUT", "/v1/admin/consumers/globex/dl", adminToken, `{}`), 201)
	acme := reader(t, url, "acme-reader", "acme-reader-password-01")
	sub, err := acme.QueueSubscribeSync("sluice.redeliver.acme.consumer.dl", "dl")
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}
	nakked := str(a.post("/v1/hooks/acme/gh", []byte(`"nak me"`), nil).body["id"])
	termed := str(a.post("/v1/hooks/acme/raw", []byte(`"term me"`), nil).body["id"])
	type letter struct {
		Seq        uint64
		HookID     string `json:"hook_id"`
		Reason     string
		Deliveries uint64
		StreamSeq  uint64 `json:"stream_seq"`
	}
	list := func(tenant string) []letter {
		t.Helper()
		r := a.admin("GET", "/v1/admin/consumers/"+tenant+"/dl/dead", adminToken, "")
		mustStatus(t, r, 200)
		var out struct {
			DeadLetters []letter `json:"dead_letters"`
		}
		if err := json.Unmarshal([]byte(r.raw), &out); err != nil {
			t.Fatal(err)
		}
		return out.DeadLetters
	}
	naks := 0
	testkit.Eventually(t, 20*time.Second, func() bool {
		if m, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			switch string(m.Data) {
			case `"nak me"`:
				naks++
				_ = m.Nak()
			case `"term me"`:
				_ = m.Term()
			}
		}
		return len(list("acme")) == 2
	}, "two dead letters")
	got := map[string]letter{}
	for _, l := range list("acme") {
		got[l.Reason] = l
	}
	if l := got["max_deliver"]; l.HookID != nakked || l.Deliveries != 2 || naks != 2 {
		t.Fatalf("max_deliver letter %+v (naks %d), want hook %s after 2 deliveries", l, naks, nakked)
	}
	if l := got["terminated"]; l.HookID != termed || l.Deliveries != 1 {
		t.Fatalf("terminated letter %+v, want hook %s after 1 delivery", l, termed)
	}
	// A letter is listed once stored, and counted once the barrier vouched
	// for it (after it): wait for the count.
	for _, reason := range []string{"max_deliver", "terminated"} {
		line := `sluice_dead_letters_total{reason="` + reason + `"}`
		testkit.Eventually(t, 10*time.Second, func() bool { return strings.HasSuffix(testkit.ScrapeLine(t, a.url, line), " 1") }, line+" 1 on /metrics")
	}
	if l := testkit.ScrapeLine(t, a.url, `sluice_consumer_dead_letters{consumer="dl",tenant="acme"}`); !strings.HasSuffix(l, " 2") {
		t.Errorf("acme/dl's dead letters on /metrics: %q", l)
	}
	if len(list("globex")) != 0 {
		t.Fatal("globex's consumer lists acme's dead letters")
	}
	// Each reader reads its tenant's letters (the consumer of DEADLETTER
	// named after the tenant) and is refused the other's.
	globex := reader(t, url, "globex-reader", "globex-reader-password-1")
	readDead := func(nc *nats.Conn, tenant string) ([]jetstream.Msg, error) {
		t.Helper()
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := js.Consumer(ctx, "DEADLETTER", tenant)
		if err != nil {
			return nil, err
		}
		b, err := c.Fetch(10, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, err
		}
		var out []jetstream.Msg
		for m := range b.Messages() {
			out = append(out, m)
		}
		return out, b.Error()
	}
	ms, err := readDead(acme, "acme")
	if err != nil || len(ms) != 2 {
		t.Fatalf("acme's reader on its dead letters: %d letters, %v", len(ms), err)
	}
	for _, m := range ms {
		if m.Headers().Get("Sluice-Dead-Consumer") != "dl" || got[m.Headers().Get("Sluice-Dead-Reason")].HookID != m.Headers().Get("Sluice-Hook-Id") {
			t.Errorf("acme's letter %s: %v", m.Subject(), m.Headers())
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	if ms, err := readDead(globex, "globex"); err != nil || len(ms) != 0 {
		t.Fatalf("globex's reader on its dead letters: %d letters, %v", len(ms), err)
	}
	for _, c := range []struct {
		nc    *nats.Conn
		other string
	}{{acme, "globex"}, {globex, "acme"}} {
		if ms, err := readDead(c.nc, c.other); err == nil {
			t.Errorf("a reader read %s's dead letters: %d", c.other, len(ms))
		}
		if !violated(t, c.nc, "$JS.API.CONSUMER.INFO.DEADLETTER."+c.other, func() error {
			_, err := c.nc.Request("$JS.API.CONSUMER.INFO.DEADLETTER."+c.other, nil, 100*time.Millisecond)
			if errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
				err = nil
			}
			return err
		}) {
			t.Errorf("a reader was not refused %s's dead letters", c.other)
		}
	}
	seq := fmt.Sprint(got["max_deliver"].Seq)
	for _, c := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/v1/admin/consumers/globex/dl/dead/" + seq, 404},
		{"POST", "/v1/admin/consumers/globex/dl/dead/" + seq + "/redrive", 404},
		{"GET", "/v1/admin/consumers/acme/dl/dead/x", 400},
		{"GET", "/v1/admin/consumers/acme/dl/dead/99999", 404},
		{"GET", "/v1/admin/consumers/acme/dl/dead/" + seq, 200},
	} {
		if r := a.admin(c.method, c.path, adminToken, ""); r.code != c.code {
			t.Errorf("%s %s: %d %.200s, want %d", c.method, c.path, r.code, r.raw, c.code)
		}
	}
	// Redrive: stored again as a new hook, delivered again to the reader.
	r := a.admin("POST", "/v1/admin/consumers/acme/dl/dead/"+seq+"/redrive", adminToken, "")
	mustStatus(t, r, 200)
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || string(m.Data) != `"nak me"` || m.Header.Get("Sluice-Redrive-Of") != seq || m.Header.Get("Sluice-Hook-Id") != nakked {
		t.Fatalf("redriven hook: %v %v", m, err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	if l := list("acme"); len(l) != 1 || l[0].Reason != "terminated" {
		t.Fatalf("after the redrive: %+v", l)
	}
	mustStatus(t, a.admin("DELETE", "/v1/admin/consumers/acme/dl/dead", adminToken, ""), 204)
	if l := list("acme"); len(l) != 0 {
		t.Fatalf("after the purge: %+v", l)
	}
}

// gateSync is the node's durability barrier at its seam (Config.Sync):
// each wait counted; while fails is set, a round that vouched for every
// scope but those fails reports (durability.PartialSyncError, as a cluster's
// barrier with one shard's server down answers), else the real barrier.
type gateSync struct {
	real  durability.Syncer
	fails atomic.Pointer[func(durability.SyncScope) bool]
	hold  atomic.Bool // a wait lasts until its caller gives up
	waits atomic.Int64
}

func (g *gateSync) Sync(ctx context.Context) error {
	g.waits.Add(1)
	if g.hold.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if f := g.fails.Load(); f != nil {
		return &durability.PartialSyncError{Err: durability.ErrRoundMissed, Affects: *f}
	}
	return durability.SyncWith(ctx, g.real)
}

// failFor makes g's rounds fail for the scopes f reports (nil: none).
func (g *gateSync) failFor(f func(durability.SyncScope) bool) {
	if f == nil {
		g.fails.Store(nil)
		return
	}
	g.fails.Store(&f)
}

// TestDeadLettersWaitForTheBarrier: each waits for its own scope of the
// barrier, and only that. While the dead letters' scope fails, the copier
// stores a terminated hook's letter but does not ack its advisory (nor
// count it); while only the tenant's shard fails, it copies and counts. A
// redrive waits for the tenant's shard: while that fails it answers 503
// and keeps the letter, while only the dead letters' scope fails it
// answers 200; once the barrier vouches again the redrive deletes it.
func TestDeadLettersWaitForTheBarrier(t *testing.T) {
	t.Parallel()
	gate := &gateSync{}
	seam := fx.Decorate(func(n *sluicefx.NATS) *sluicefx.NATS {
		gate.real, n.Sync = n.Sync, gate
		return n
	})
	a := startAppWith(t, t.TempDir(), "", []fx.Option{seam}, "--admin-token", adminToken)
	if gate.real == nil {
		t.Fatal("the node has no barrier: it is not at durability synced")
	}
	mustStatus(t, a.admin("PUT", "/v1/admin/consumers/acme/dl", adminToken, `{"max_deliver":1}`), 201)
	sub, err := a.nats.Conn.QueueSubscribeSync("sluice.redeliver.acme.consumer.dl", "dl")
	if err != nil {
		t.Fatal(err)
	}
	// The redriven hooks are left unread: their pending delivery would
	// hold the node's connection's drain at stop.
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	first := str(a.post("/v1/hooks/acme/gh", []byte(`"term me"`), nil).body["id"])
	second := str(a.post("/v1/hooks/acme/gh", []byte(`"term me too"`), nil).body["id"])
	delivered := map[string]*nats.Msg{}
	for range 2 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("hooks %s, %s: %v", first, second, err)
		}
		delivered[m.Header.Get("Sluice-Hook-Id")] = m
	}
	acmeShard := func(s durability.SyncScope) bool { return s.Tenant == "acme" }
	deadScope := func(s durability.SyncScope) bool { return s.DeadLetters }
	letters := func() []hooks.DeadLetter {
		r := a.admin("GET", "/v1/admin/consumers/acme/dl/dead", adminToken, "")
		var out struct {
			DeadLetters []hooks.DeadLetter `json:"dead_letters"`
		}
		_ = json.Unmarshal([]byte(r.raw), &out)
		return out.DeadLetters
	}
	terminated := func() string {
		return testkit.ScrapeLine(t, a.url, `sluice_dead_letters_total{reason="terminated"}`)
	}

	// Only the tenant's shard fails: the copier's own scope is vouched for.
	gate.failFor(acmeShard)
	if err := delivered[first].Term(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return strings.HasSuffix(terminated(), " 1") },
		"the first letter counted while only acme's shard fails")

	// Only the dead letters' scope fails: stored, but neither acked nor counted.
	gate.failFor(deadScope)
	waits := gate.waits.Load()
	if err := delivered[second].Term(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(letters()) == 2 && gate.waits.Load() > waits },
		"the second letter stored and the copier waiting on the barrier")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.nats.JS.Consumer(ctx, "SLUICE_ADVISORIES", "deadletter")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(ctx); err != nil || info.NumAckPending != 1 {
		t.Fatalf("the advisory of a letter the barrier did not vouch for: %+v %v, want it unacked", info, err)
	}
	if l := terminated(); !strings.HasSuffix(l, " 1") {
		t.Fatalf("a letter the barrier did not vouch for counted: %q", l)
	}
	seqOf := map[string]uint64{}
	for _, l := range letters() {
		seqOf[l.HookID] = l.Seq
	}
	letter := func(id string) string { return "/v1/admin/consumers/acme/dl/dead/" + fmt.Sprint(seqOf[id]) }

	// A redrive while only the dead letters' scope fails: its hook's
	// shard is vouched for, so it is redriven.
	mustStatus(t, a.admin("POST", letter(first)+"/redrive", adminToken, ""), 200)
	mustStatus(t, a.admin("GET", letter(first), adminToken, ""), 404)

	// A redrive while the tenant's shard fails: 503, the letter kept.
	gate.failFor(acmeShard)
	waits = gate.waits.Load()
	if r := a.admin("POST", letter(second)+"/redrive", adminToken, ""); r.code != 503 || r.body["error"] != "store_unavailable" {
		t.Fatalf("redrive while acme's shard fails: %d %s, want 503 store_unavailable", r.code, r.raw)
	}
	if gate.waits.Load() == waits {
		t.Fatal("the redrive answered without waiting on the barrier")
	}
	mustStatus(t, a.admin("GET", letter(second), adminToken, ""), 200)
	// Again, and its answer lost: the barrier holds until the caller
	// gives up (the hook is stored, the letter kept).
	gate.failFor(nil)
	gate.hold.Store(true)
	lctx, lcancel := context.WithTimeout(context.Background(), time.Second)
	req, err := http.NewRequestWithContext(lctx, "POST", a.url+letter(second)+"/redrive", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	if res, err := http.DefaultClient.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("a redrive whose barrier holds answered %d", res.StatusCode)
	}
	lcancel()
	gate.hold.Store(false)
	r := a.admin("POST", letter(second)+"/redrive", adminToken, "")
	mustStatus(t, r, 200)
	mustStatus(t, a.admin("GET", letter(second), adminToken, ""), 404)
	// Three attempts, one hook stored: the one the 200 names.
	var copies []uint64
	st, err := a.nats.JS.Stream(ctx, "HOOKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		if m, err := st.GetMsg(ctx, seq); err == nil && m.Header.Get("Sluice-Redrive-Of") == fmt.Sprint(seqOf[second]) {
			copies = append(copies, seq)
		}
	}
	if len(copies) != 1 || r.body["stream_seq"] != float64(copies[0]) {
		t.Fatalf("letter %d redriven three times (503, answer lost, 200 %v): copies at %v, want one, the 200's", seqOf[second], r.body["stream_seq"], copies)
	}
}

// TestManagedConsumerSharded: on a fleet of 2 shards a tenant of shard 1
// has its consumer, its hooks and its dead letters' source on HOOKS_1.
func TestManagedConsumerSharded(t *testing.T) {
	t.Parallel()
	a := startApp(t, "", "--admin-token", adminToken, "--partitions", "4/2")
	tenant := ""
	for i := 0; tenant == ""; i++ {
		if c := fmt.Sprintf("t%d", i); protocol.Shard(c, 2) == 1 {
			tenant = c
		}
	}
	r := a.admin("PUT", "/v1/admin/consumers/"+tenant+"/w", adminToken, `{"max_deliver":1}`)
	mustStatus(t, r, 201)
	if r.body["stream"] != "HOOKS_1" {
		t.Fatalf("consumer of %s (shard 1): %s", tenant, r.raw)
	}
	sub, err := a.nats.Conn.QueueSubscribeSync(str(r.body["deliver_subject"]), "w")
	if err != nil {
		t.Fatal(err)
	}
	id := str(a.post("/v1/hooks/"+tenant+"/gh", []byte(`{}`), nil).body["id"])
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil || m.Header.Get("Sluice-Hook-Id") != id {
		t.Fatalf("hook of %s: %v %v", tenant, m, err)
	}
	if err := m.Term(); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		r := a.admin("GET", "/v1/admin/consumers/"+tenant+"/w/dead", adminToken, "")
		return r.code == 200 && strings.Contains(r.raw, `"stream":"HOOKS_1"`) && strings.Contains(r.raw, id)
	}, "the dead letter from HOOKS_1")
}

// TestManagedConsumerOpenAdmission: with admission open (allow_unknown:
// true) a tenant nobody listed gets its hooks stored, and so its
// consumers are created, as on a closed node neither is
// (TestManagedConsumerBadInput: 404 unknown_tenant).
func TestManagedConsumerOpenAdmission(t *testing.T) {
	t.Parallel()
	a := startApp(t, "allow_unknown: true\n"+rewindYAML, "--admin-token", adminToken)
	mustStatus(t, a.post("/v1/hooks/nosuch-tenant/raw", []byte(`{}`), nil), 202)
	mustStatus(t, a.admin("PUT", "/v1/admin/consumers/nosuch-tenant/w", adminToken, `{}`), 201)
}
