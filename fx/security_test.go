package fx_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	uberfx "go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// startLogged starts an app with args and returns its log.
func startLogged(t *testing.T, args ...string) *testkit.LogBuffer {
	t.Helper()
	cfg, err := config.Parse(append([]string{"--http-addr", "127.0.0.1:0", "--partitions", "4", "--nats-listen", "off", "--data-dir", t.TempDir()}, args...),
		nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := &testkit.LogBuffer{}
	app := fxtest.New(t, sluicefx.Options(context.Background(), cfg, slog.New(slog.NewTextHandler(buf, nil))))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	return buf
}

// TestQuickstartSaysSo: without tenants the edge accepts anything, and its
// start-up log says so; with tenants it does not.
func TestQuickstartSaysSo(t *testing.T) {
	t.Parallel()
	const msg = "no tenants configured: accepting any tenant and source"
	if log := startLogged(t).String(); !strings.Contains(log, msg) {
		t.Fatalf("quickstart log lacks %q:\n%s", msg, log)
	}
	if log := startLogged(t, "--config", writeYAML(t, "tenants: {a: {}}\n")).String(); strings.Contains(log, msg) {
		t.Fatalf("configured edge logs %q:\n%s", msg, log)
	}
}

// natsConf writes a nats-server configuration file for --nats-config.
func natsConf(t *testing.T, body string) string {
	t.Helper()
	return testkit.WriteTemp(t, "nats.conf", []byte(body+"\n"))
}

func writeYAML(t *testing.T, body string) string {
	t.Helper()
	return testkit.WriteTemp(t, "edge.yaml", []byte(body))
}

// TestBodyOverMaxPayloadRefused: a max_body_bytes that cannot fit in one
// NATS message with its headers is a start-up error naming the field.
func TestBodyOverMaxPayloadRefused(t *testing.T) {
	t.Parallel()
	y := writeYAML(t, "tenants: {a: {sources: {big: {max_body_bytes: 8388608}}}}\n")
	_, _, err := startErr(t, "--config", y, "--data-dir", t.TempDir(), "--nats-listen", "off")
	if err == nil || !strings.Contains(err.Error(), "tenants.a.sources.big.max_body_bytes: 8388608 bytes plus 8192 bytes of headers exceed the NATS server's max_payload of 8388608 bytes") {
		t.Fatalf("start: %v", err)
	}
}

// TestNATSConfigTLSAndNKey: the tls and authorization blocks of
// --nats-config are the embedded server's: an anonymous or plaintext
// client is refused; one with the file's nkey over TLS is served, and the
// app itself (in-process) still runs.
func TestNATSConfigTLSAndNKey(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	seedFile := testkit.WriteTemp(t, "edge.nk", seed)
	p := testkit.NewPKI(t)
	cert, key := p.Issue("nats")
	port := testkit.FreePort(t)
	conf := natsConf(t, fmt.Sprintf(`listen: "0.0.0.0:%d"
tls { cert_file: %q, key_file: %q }
authorization { users: [ { nkey: %s } ] }`, port, cert, key, pub))
	h, _, _ := start(t, "--data-dir", t.TempDir(), "--nats-config", conf)
	url := fmt.Sprintf("tls://127.0.0.1:%d", port)
	nkeyOpt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]nats.Option{
		"anonymous TLS":  {nats.RootCAs(p.CAFile)},
		"nkey plaintext": {nkeyOpt},
	} {
		u := url
		if name == "nkey plaintext" {
			u = fmt.Sprintf("nats://127.0.0.1:%d", port)
		}
		if nc, err := nats.Connect(u, append(opts, nats.MaxReconnects(0))...); err == nil {
			nc.Close()
			t.Errorf("%s client accepted", name)
		}
	}
	nc, err := nats.Connect(url, nats.RootCAs(p.CAFile), nkeyOpt)
	if err != nil {
		t.Fatalf("nkey TLS client refused: %v", err)
	}
	nc.Close()
	if code := post(t, h, "/v1/hooks/t/s", "k1"); code != 202 {
		t.Fatalf("hook through the app: %d", code)
	}
}

// TestNATSConfigAccounts: the accounts of --nats-config are the embedded
// server's: their users sign in to their own account, which sees none of
// sluice's streams (those stay in the global account, with JetStream),
// and the app still stores hooks.
func TestNATSConfigAccounts(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	conf := natsConf(t, fmt.Sprintf(`listen: "127.0.0.1:%d"
accounts {
  SYS: { users: [ { user: sys, password: "sys-0123456789abcdef" } ] }
  APP: { jetstream: enabled, users: [ { user: app, password: "app-0123456789abcdef" } ] }
}
system_account: SYS`, port))
	h, _, _ := start(t, "--data-dir", t.TempDir(), "--nats-config", conf)
	if code := post(t, h, "/v1/hooks/t/s", "k1"); code != 202 {
		t.Fatalf("hook through the app: %d", code)
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("anonymous client accepted")
	}
	nc, err := nats.Connect(url, nats.UserInfo("app", "app-0123456789abcdef"))
	if err != nil {
		t.Fatalf("the file's user: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Stream(testkit.Context(t), "HOOKS"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("account APP sees sluice's HOOKS: %v", err)
	}
	snc, err := nats.Connect(url, nats.UserInfo("sys", "sys-0123456789abcdef"))
	if err != nil {
		t.Fatalf("the system account's user: %v", err)
	}
	defer snc.Close()
	if _, err := snc.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second); err != nil {
		t.Fatalf("system account: %v", err)
	}
}

// roleYAML has two tenants and, for acme, a service user and a consumer
// user of the embedded server.
const roleYAML = `
tenants:
  acme: {sources: {s: {dedupe: none}}}
  globex: {sources: {s: {dedupe: none}}}
nats_users:
  acme-svc: {role: service, tenants: [acme], password: "acme-svc-password-0123"}
  acme-reader: {role: consumer, tenants: [acme], password: "acme-reader-password-01"}
  ops: {role: operator, password: "ops-password-0123456789"}
`

// TestTenantRecordsNodeOnly: the tenants bucket (records with sealed
// secrets) is the node role's alone: the server refuses its reads and
// watches to service, consumer and operator users.
func TestTenantRecordsNodeOnly(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	start(t, "--data-dir", t.TempDir(), "--nats-listen", fmt.Sprintf("0.0.0.0:%d", port), "--config", writeYAML(t, roleYAML))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for _, u := range [][2]string{{"acme-svc", "acme-svc-password-0123"}, {"acme-reader", "acme-reader-password-01"}, {"ops", "ops-password-0123456789"}} {
		v := &violations{}
		nc := connectAs(t, url, u[0], u[1], v)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(testkit.Context(t), 2*time.Second)
		_, err = js.KeyValue(ctx, "sluice_tenants")
		cancel()
		if err == nil {
			t.Fatalf("%s opened the tenants bucket", u[0])
		}
		for _, subj := range []string{"$JS.API.DIRECT.GET.KV_sluice_tenants.$KV.sluice_tenants.acme", "$JS.API.STREAM.MSG.GET.KV_sluice_tenants", "$KV.sluice_tenants.acme"} {
			if err := nc.Publish(subj, nil); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, func() bool { return v.saw(`Publish to "` + subj + `"`) }, u[0]+": publish to "+subj+" refused")
		}
		if _, err := nc.SubscribeSync("$KV.sluice_tenants.>"); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 5*time.Second, func() bool { return v.saw(`Subscription to "$KV.sluice_tenants.>"`) }, u[0]+": watch refused")
	}
}

// violations collects the server's permission violations of a connection.
type violations struct {
	mu   sync.Mutex
	errs []string
	// waits end their context when an error naming their text comes.
	waits map[string]context.CancelFunc
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
	for sub, cancel := range v.waits {
		if strings.Contains(err.Error(), sub) {
			cancel()
		}
	}
}

// refused is ctx, ended as soon as the server reports that it refused a
// publish to subj (the request never reached JetStream: nothing waits for
// an answer that cannot come), else after 2 s.
func (v *violations) refused(ctx context.Context, subj string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	sub := `Publish to "` + subj + `"`
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.waits == nil {
		v.waits = map[string]context.CancelFunc{}
	}
	v.waits[sub] = cancel
	return ctx, func() {
		v.mu.Lock()
		delete(v.waits, sub)
		v.mu.Unlock()
		cancel()
	}
}

func (v *violations) saw(sub string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		if strings.Contains(e, sub) {
			return true
		}
	}
	return false
}

func connectAs(t *testing.T, url, user, pass string, v *violations) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, pass), nats.CustomInboxPrefix("_INBOX."+user), nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestServiceRoleConfined: a service user for acme is served on acme's
// scoped subjects and refused by the server itself for globex's, for
// reset, for settling another tenant's claims, for the owners' subjects
// and for the $JS/$KV APIs.
func TestServiceRoleConfined(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	start(t, "--data-dir", t.TempDir(), "--nats-listen", fmt.Sprintf("0.0.0.0:%d", port), "--config", writeYAML(t, roleYAML))
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	v := &violations{}
	nc := connectAs(t, url, "acme-svc", "acme-svc-password-0123", v)
	hit := `{"charges":[{"kind":"hooks","tenant":"acme","increment_us":1000,"capacity_us":10000}]}`
	m, err := nc.Request("sluice.v1.t.acme.quota.hit", []byte(hit), 5*time.Second)
	if err != nil || !strings.Contains(string(m.Data), `"result":"ok"`) {
		t.Fatalf("own scoped hit: %v %v", m, err)
	}
	// The body may not act for another tenant on acme's subject (the
	// service's check).
	m, err = nc.Request("sluice.v1.t.acme.claims.settle", []byte(`{"tenant":"globex","source":"s","key":"k","hook_id":"h","revision":1}`), 5*time.Second)
	if err != nil || !strings.Contains(m.Header.Get("Nats-Service-Error"), "does not match the subject's tenant") {
		t.Fatalf("settle of globex's claim on acme's subject: %v %v", m, err)
	}
	// Everything else is refused by the server.
	for _, subj := range []string{
		"sluice.v1.t.globex.quota.hit", "sluice.v1.quota.hit", "sluice.v1.quota.reset",
		"sluice.v1.t.globex.claims.settle", "sluice.v1.claims.settle", "sluice.v1.quota.p.0",
		"$KV.sluice_claims.x", "$JS.API.STREAM.INFO.HOOKS", "$JS.API.DIRECT.GET.KV_sluice_claims",
	} {
		if err := nc.Publish(subj, []byte(`{"tenant":"globex"}`)); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 5*time.Second, func() bool { return v.saw(`Publish to "` + subj + `"`) }, "publish to "+subj+" refused")
	}
	for _, subj := range []string{"$KV.>", "sluice.v1.quota.p.*", "sluice.hooks.>", "_INBOX.>", "sluice.v1.t.*.quota.hit"} {
		if _, err := nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 5*time.Second, func() bool { return v.saw(`Subscription to "` + subj + `"`) }, "subscription to "+subj+" refused")
	}
}

// TestConsumerRoleSeesOnlyItsTenant: an operator creates acme's durable
// consumer (the rewind admin call); a consumer user for acme pulls acme's
// stored hooks through it, and the server refuses it every consumer
// creation — of globex's hooks, of its own (a push consumer could deliver
// them to any subject: JetStream does not check a deliver subject against
// its creator's permissions) — and a read of the stream.
func TestConsumerRoleSeesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	port := testkit.FreePort(t)
	const admin = "admin-token-0123456789"
	h, _, _ := start(t, "--data-dir", t.TempDir(), "--nats-listen", fmt.Sprintf("0.0.0.0:%d", port), "--config", writeYAML(t, roleYAML), "--admin-token", admin)
	for _, p := range []string{"/v1/hooks/acme/s", "/v1/hooks/globex/s", "/v1/hooks/acme/s"} {
		if code := post(t, h, p, ""); code != 202 {
			t.Fatalf("%s: %d", p, code)
		}
	}
	tok := protocol.TenantToken("acme")
	r := testkit.HTTP(t, http.MethodPost, "http://"+*h.Addr.Load()+"/v1/admin/hooks/acme/rewind", []byte(`{"consumer":"`+tok+`","durable":true}`), map[string]string{"Authorization": "Bearer " + admin})
	if r.Code != http.StatusCreated {
		t.Fatalf("rewind creating acme's consumer: %d %s", r.Code, r.Body)
	}
	v := &violations{}
	nc := connectAs(t, fmt.Sprintf("nats://127.0.0.1:%d", port), "acme-reader", "acme-reader-password-01", v)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	cons, err := js.Consumer(ctx, "HOOKS", tok)
	if err != nil {
		t.Fatalf("acme's consumer: %v", err)
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for msg := range batch.Messages() {
		if got := msg.Headers().Get("Sluice-Tenant"); got != "acme" {
			t.Fatalf("consumer for acme got a hook of %q", got)
		}
		if err := msg.Ack(); err != nil {
			t.Fatalf("ack: %v", err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("acme's consumer got %d hooks, want 2", n)
	}
	// No consumer of its own making: not on globex's hooks, not under
	// acme's consumer name, not a push consumer of acme's own hooks
	// delivering to globex's redelivery subject; no read of the stream.
	for _, cfg := range []jetstream.ConsumerConfig{
		{Durable: "globex", FilterSubject: "sluice.hooks.globex.>"},
		{Durable: tok, FilterSubject: "sluice.hooks.globex.>"},
		{Durable: tok, FilterSubject: "sluice.hooks.>"},
		{Durable: tok + "2", FilterSubject: "sluice.hooks." + tok + ".>"},
	} {
		cctx, cancel := v.refused(ctx, "$JS.API.CONSUMER.CREATE.HOOKS."+cfg.Durable+"."+cfg.FilterSubject)
		_, err := js.CreateOrUpdateConsumer(cctx, "HOOKS", cfg)
		cancel()
		if err == nil {
			t.Fatalf("consumer %+v created", cfg)
		}
	}
	pushSubj := "$JS.API.CONSUMER.CREATE.HOOKS.spy.sluice.hooks." + tok + ".>"
	pushReq := `{"stream_name":"HOOKS","config":{"durable_name":"spy","deliver_subject":"sluice.redeliver.globex.spy","filter_subject":"sluice.hooks.` + tok + `.>","ack_policy":"none"}}`
	pctx, cancel := v.refused(ctx, pushSubj)
	_, err = nc.RequestWithContext(pctx, pushSubj, []byte(pushReq))
	cancel()
	if err == nil {
		t.Fatal("a push consumer of acme's hooks to globex's subject was created")
	}
	sctx, cancel := v.refused(ctx, "$JS.API.STREAM.INFO.HOOKS")
	_, err = js.Stream(sctx, "HOOKS")
	cancel()
	if err == nil {
		t.Fatal("stream info read")
	}
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE.HOOKS.globex", "$JS.API.CONSUMER.CREATE.HOOKS." + tok + "2", "$JS.API.CONSUMER.CREATE.HOOKS.spy"} {
		testkit.Eventually(t, 5*time.Second, func() bool { return v.saw(`Publish to "` + subj) }, subj+" refused by the server")
	}
}

// TestMaxPayloadWarningSaysWhatToChange: against a NATS server with the
// stock 1 MiB max_payload the default body bound does not fit; the warning
// names both fixes, and the second one (the bound in the file) ends it.
func TestMaxPayloadWarningSaysWhatToChange(t *testing.T) {
	t.Parallel()
	stock, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	stock.Start()
	t.Cleanup(stock.Shutdown)
	if !stock.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	url := stock.ClientURL()
	log := startLogged(t, "--nats-url", url).String()
	for _, want := range []string{"raise max_payload on the NATS server to at least 1056768", "defaults: {source: {max_body_bytes: 1040384}}"} {
		if !strings.Contains(log, want) {
			t.Errorf("the warning lacks %q:\n%s", want, log)
		}
	}
	y := writeYAML(t, "defaults: {source: {max_body_bytes: 1040384}}\n")
	if log := startLogged(t, "--nats-url", url, "--config", y).String(); strings.Contains(log, "max_payload") {
		t.Errorf("the bound that fits still warns:\n%s", log)
	}
}

// TestPasswordWarnings: nats-server's "Plaintext passwords detected" is
// about its own config file, which the embedded server does not have (its
// users are given in memory): it is not shown; a password written in
// sluice's file is sluice's warning, naming the user and password_env.
func TestPasswordWarnings(t *testing.T) {
	t.Parallel()
	y := writeYAML(t, "nats_users:\n  ops: {role: operator, password: \"inline-password-0123456789\"}\n")
	log := startLogged(t, "--config", y).String()
	if strings.Contains(log, "Plaintext passwords detected") {
		t.Errorf("nats-server's plaintext warning shown:\n%s", log)
	}
	if !strings.Contains(log, "nats_users.ops.password is written in --config in plain text: prefer password_env") {
		t.Errorf("no warning about the password in the file:\n%s", log)
	}
	if log := startLogged(t).String(); strings.Contains(log, "Plaintext passwords") || strings.Contains(log, "plain text") {
		t.Errorf("a warning without any password in the file:\n%s", log)
	}
}

// TestNATSAsyncErrorsInTheLog: the connection's asynchronous errors go to
// the log (nats.go's default writes them to stderr, outside the log's
// format); a consumer already gone when a drained watcher deletes it — on
// about half of the shutdowns, "consumer not found … $KV.sluice_limits.>"
// — is not a warning.
func TestNATSAsyncErrorsInTheLog(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse([]string{"--http-addr", "127.0.0.1:0", "--partitions", "4", "--nats-listen", "off", "--data-dir", t.TempDir()},
		nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := &testkit.LogBuffer{}
	var n *sluicefx.NATS
	app := fxtest.New(t, sluicefx.Options(context.Background(), cfg, slog.New(slog.NewTextHandler(buf, nil))), uberfx.Populate(&n))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	report := n.Conn.ErrorHandler()
	report(n.Conn, nil, nats.ErrConsumerNotFound)
	report(n.Conn, nil, nats.ErrSlowConsumer)
	log := buf.String()
	if !strings.Contains(log, "nats async error") || !strings.Contains(log, nats.ErrSlowConsumer.Error()) {
		t.Errorf("a slow consumer is not in the log:\n%s", log)
	}
	if strings.Contains(log, nats.ErrConsumerNotFound.Error()) {
		t.Errorf("a consumer already gone is logged as a warning:\n%s", log)
	}
}
