package authz_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// user is one NATS user of a test server: its role, tenants and password.
type user struct {
	name, role string
	tenants    []string
}

// authzServer is a standalone nats-server (the nats-server module, in
// process) that loaded the authorization block ConfigBlock prints for
// users — with the credential line `edge nats-authz` prints, the password
// read from the environment by the server — and JetStream.
type authzServer struct {
	t     *testing.T
	srv   *server.Server
	users map[string]user
}

func passwordOf(u string) string { return "pw-" + u + "-0123456789" }

// startAuthzServer writes the configuration, sets each user's password
// variable (PasswordEnv) and starts the server on a random loopback port.
func startAuthzServer(t *testing.T, users ...user) *authzServer {
	return startShardedAuthzServer(t, 1, users...)
}

// startShardedAuthzServer is startAuthzServer for a fleet of shards
// shards.
func startShardedAuthzServer(t *testing.T, shards int, users ...user) *authzServer {
	t.Helper()
	var entries []authz.Entry
	s := &authzServer{t: t, users: map[string]user{}}
	for _, u := range users {
		p, err := authz.ForShards(u.role, u.name, "sluice", "HOOKS", shards, u.tenants)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(authz.PasswordEnv(u.name), passwordOf(u.name))
		entries = append(entries, authz.Entry{User: u.name, Role: u.role, Tenants: u.tenants, Credential: authz.PasswordCredential(u.name), Perms: p})
		s.users[u.name] = u
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:-1\"\njetstream { store_dir: %q }\n%s", t.TempDir(), authz.ConfigBlock(entries))
	s.srv = testkit.ConfServer(t, conf)
	return s
}

// connect connects as name with its password and its own inbox prefix.
func (s *authzServer) connect(name string) *nats.Conn {
	s.t.Helper()
	opts := []nats.Option{nats.UserInfo(name, passwordOf(name)), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if s.users[name].role != authz.RoleNode {
		opts = append(opts, nats.CustomInboxPrefix(authz.InboxPrefix(name)))
	}
	nc, err := nats.Connect(s.srv.ClientURL(), opts...)
	if err != nil {
		s.t.Fatalf("connect as %s: %v", name, err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// hooksStream creates the HOOKS stream as the node user, returning the
// node's JetStream and the stream.
func (s *authzServer) hooksStream(ctx context.Context) (jetstream.JetStream, jetstream.Stream) {
	s.t.Helper()
	js, err := jetstream.New(s.connect("n"))
	if err != nil {
		s.t.Fatal(err)
	}
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "HOOKS", Subjects: []string{"sluice.hooks.>"}})
	if err != nil {
		s.t.Fatal(err)
	}
	return js, st
}

// refused reports the server's verdict on what op did with subj: the
// server answers a permission violation with -ERR before the flush's PONG,
// and nats.go records it (LastError) before the flush returns.
func refused(t *testing.T, nc *nats.Conn, subj string, op func() error) bool {
	t.Helper()
	if err := op(); err != nil {
		t.Fatalf("%s: %v", subj, err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush after %s: %v", subj, err)
	}
	err := nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), fmt.Sprintf("to %q", subj))
}

func pubRefused(t *testing.T, nc *nats.Conn, subj string) bool {
	return refused(t, nc, subj, func() error { return nc.Publish(subj, nil) })
}

func subRefused(t *testing.T, nc *nats.Conn, subj string) bool {
	var sub *nats.Subscription
	r := refused(t, nc, subj, func() (err error) { sub, err = nc.SubscribeSync(subj); return err })
	_ = sub.Unsubscribe()
	return r
}

var roleUsers = []user{
	{"n", authz.RoleNode, nil},
	{"op", authz.RoleOperator, nil},
	{"acme-svc", authz.RoleService, []string{"acme"}},
	{"acme-c", authz.RoleConsumer, []string{"acme", "a.b"}},
	{"globex-c", authz.RoleConsumer, []string{"globex"}},
}

// TestPrintedBlockLoads: the printed credential line gives the user the
// password of its variable — not the text "$VAR" — and a wrong password
// is refused.
func TestPrintedBlockLoads(t *testing.T) {
	s := startAuthzServer(t, roleUsers...)
	s.connect("acme-svc")
	for _, pw := range []string{"$" + authz.PasswordEnv("acme-svc"), "wrong"} {
		if nc, err := nats.Connect(s.srv.ClientURL(), nats.UserInfo("acme-svc", pw)); err == nil {
			nc.Close()
			t.Errorf("password %q accepted", pw)
		}
	}
}

// TestTenantsBucketIsNodeOnly: no role but node may publish to or
// subscribe on any subject of the tenants bucket (its KV subjects, its
// stream's JetStream API, direct gets) — the server decides.
func TestTenantsBucketIsNodeOnly(t *testing.T) {
	s := startAuthzServer(t, roleUsers...)
	subjects := []string{
		"$KV.sluice_tenants.acme", "$JS.API.DIRECT.GET.KV_sluice_tenants.$KV.sluice_tenants.acme",
		"$JS.API.STREAM.MSG.GET.KV_sluice_tenants", "$JS.API.STREAM.INFO.KV_sluice_tenants",
		"$JS.API.CONSUMER.CREATE.KV_sluice_tenants", "$JS.API.CONSUMER.CREATE.KV_sluice_tenants.x.$KV.sluice_tenants.>",
	}
	for _, u := range roleUsers {
		nc := s.connect(u.name)
		for _, subj := range subjects {
			node := u.role == authz.RoleNode
			if pubRefused(t, nc, subj) == node {
				t.Errorf("role %s: publish %s: refused %v, want %v", u.role, subj, node, !node)
			}
			if strings.ContainsAny(subj, "*>") {
				continue
			}
			if subRefused(t, nc, subj) == node {
				t.Errorf("role %s: subscribe %s: refused %v, want %v", u.role, subj, node, !node)
			}
		}
	}
}

// TestConsumerReadsOwnRedeliveries: a consumer of acme may subscribe to
// acme's redelivery namespace, and to no other tenant's.
func TestConsumerReadsOwnRedeliveries(t *testing.T) {
	s := startAuthzServer(t, roleUsers...)
	nc := s.connect("acme-c")
	if got := authz.RedeliverPrefix("sluice", "a.b"); got != "sluice.redeliver.a=2Eb" {
		t.Fatalf("RedeliverPrefix = %q", got)
	}
	for subj, want := range map[string]bool{
		"sluice.redeliver.acme": true, "sluice.redeliver.acme.billing": true, "sluice.redeliver.a=2Eb.x.y": true,
		"sluice.redeliver.globex.x": false, "sluice.redeliver.acmex": false, "sluice.redeliver": false,
		"sluice.hooks.globex.gh": false, "sluice.v1.quota.hit": false, "_INBOX.globex-c.x": false,
	} {
		if subRefused(t, nc, subj) == want {
			t.Errorf("subscribe %s: allowed %v, want %v", subj, !want, want)
		}
	}
}

// TestConsumerRefusedOnAnotherTenantsDurable: the hooks stream holds a
// hook of acme and one of globex, each read through its tenant's durable
// consumer (named by the tenant's token, created by the node). acme's
// consumer user pulls and acks acme's hook; on globex's durable it can
// neither read the consumer, pull nor ack — and globex's hook is still
// there, unread, for globex's own consumer user.
func TestConsumerRefusedOnAnotherTenantsDurable(t *testing.T) {
	s := startAuthzServer(t, roleUsers...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, st := s.hooksStream(ctx)
	for _, tenant := range []string{"acme", "globex"} {
		tok := protocol.TenantToken(tenant)
		if _, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: tok, FilterSubject: "sluice.hooks." + tok + ".>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "sluice.hooks."+tok+".src", []byte(tenant)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name, durable string) (jetstream.Msg, error) {
		ujs, err := jetstream.New(s.connect(name))
		if err != nil {
			return nil, err
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		c, err := ujs.Consumer(cctx, "HOOKS", durable)
		if err != nil {
			return nil, err
		}
		return c.Next(jetstream.FetchMaxWait(2 * time.Second))
	}
	m, err := read("acme-c", "acme")
	if err != nil || string(m.Data()) != "acme" {
		t.Fatalf("acme's consumer on its own durable: %v %v", m, err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("acme's consumer acks its own hook: %v", err)
	}
	if m, err := read("acme-c", "globex"); err == nil {
		t.Fatalf("acme's consumer read globex's durable: %q", m.Data())
	}
	nc := s.connect("acme-c")
	for _, subj := range []string{"$JS.API.CONSUMER.INFO.HOOKS.globex", "$JS.API.CONSUMER.MSG.NEXT.HOOKS.globex", "$JS.ACK.HOOKS.globex.1.2.2.0.0.0.0", "$JS.API.CONSUMER.CREATE.HOOKS.globex", "$JS.API.CONSUMER.DURABLE.CREATE.HOOKS.acmex",
		"$JS.API.CONSUMER.INFO.DEADLETTER.globex", "$JS.API.CONSUMER.MSG.NEXT.DEADLETTER.globex", "$JS.ACK.DEADLETTER.globex.1.2.2.0.0.0.0", "$JS.API.CONSUMER.CREATE.DEADLETTER.acme"} {
		if !pubRefused(t, nc, subj) {
			t.Errorf("acme's consumer: publish %s allowed", subj)
		}
	}
	info, err := js.Consumer(ctx, "HOOKS", "globex")
	if err != nil {
		t.Fatal(err)
	}
	if ci := info.CachedInfo(); ci.NumPending != 1 || ci.NumAckPending != 0 || ci.Delivered.Consumer != 0 {
		t.Fatalf("globex's durable after acme's consumer tried it: pending %d, ack pending %d, delivered %d; want 1, 0, 0", ci.NumPending, ci.NumAckPending, ci.Delivered.Consumer)
	}
	if m, err := read("globex-c", "globex"); err != nil || string(m.Data()) != "globex" {
		t.Fatalf("globex's consumer on its own durable: %v %v", m, err)
	}
}

// TestConsumerReadsItsShardsStreams: with 3 shards a consumer of two
// tenants in two shards reads each tenant's durable in that tenant's
// shard's stream; a consumer of one tenant is refused its tenant's durable
// name in every other shard's stream.
func TestConsumerReadsItsShardsStreams(t *testing.T) {
	const shards = 3
	a, b := "acme", ""
	for i := 0; b == ""; i++ {
		if c := fmt.Sprintf("t%d", i); protocol.Shard(c, shards) != protocol.Shard(a, shards) {
			b = c
		}
	}
	s := startShardedAuthzServer(t, shards, user{"n", authz.RoleNode, nil}, user{"both", authz.RoleConsumer, []string{a, b}}, user{"only-a", authz.RoleConsumer, []string{a}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(s.connect("n"))
	if err != nil {
		t.Fatal(err)
	}
	for k := range shards {
		capture := protocol.ShardHooksSubjects("sluice", k)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: protocol.HooksStream(k), Subjects: []string{capture},
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: capture, Destination: "sluice.hooks.>"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tenant := range []string{a, b} {
		tok := protocol.TenantToken(tenant)
		k := protocol.Shard(tenant, shards)
		for j := range shards { // the tenant's durable name in every stream
			if _, err := js.CreateOrUpdateConsumer(ctx, protocol.HooksStream(j), jetstream.ConsumerConfig{Durable: tok, FilterSubject: "sluice.hooks." + tok + ".>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := js.Publish(ctx, protocol.ShardPublishSubject("sluice", k, shards, "sluice.hooks."+tok+".src"), []byte(tenant)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name, stream, durable string) (jetstream.Msg, error) {
		ujs, err := jetstream.New(s.connect(name))
		if err != nil {
			return nil, err
		}
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		c, err := ujs.Consumer(cctx, stream, durable)
		if err != nil {
			return nil, err
		}
		return c.Next(jetstream.FetchMaxWait(2 * time.Second))
	}
	for _, tenant := range []string{a, b} {
		m, err := read("both", protocol.TenantHooksStream(tenant, shards), protocol.TenantToken(tenant))
		if err != nil || string(m.Data()) != tenant {
			t.Fatalf("a consumer of %s reads %s: %v %v", tenant, protocol.TenantHooksStream(tenant, shards), m, err)
		}
	}
	nc := s.connect("only-a")
	for k := range shards {
		stream := protocol.HooksStream(k)
		for _, subj := range []string{"$JS.API.CONSUMER.INFO." + stream + "." + a, "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + a} {
			if allowed := !pubRefused(t, nc, subj); allowed != (k == protocol.Shard(a, shards)) {
				t.Errorf("a consumer of %s (shard %d): publish %s allowed %v", a, protocol.Shard(a, shards), subj, allowed)
			}
		}
	}
}

// TestConsumerAcksPushedHooks: through the printed block (allow_responses),
// acme's consumer user acks a hook a push consumer of acme delivered to it
// under acme's redelivery namespace — whatever the consumer's name, which
// no permission lists — and globex's consumer user can neither receive
// nor ack it.
func TestConsumerAcksPushedHooks(t *testing.T) {
	s := startAuthzServer(t, roleUsers...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := s.hooksStream(ctx)
	deliver := protocol.ConsumerDeliverSubject("sluice", "acme", "any-name")
	c, err := js.CreatePushConsumer(ctx, "HOOKS", jetstream.ConsumerConfig{Durable: protocol.ManagedConsumer("acme", "any-name"),
		FilterSubject: "sluice.hooks.acme.>", AckPolicy: jetstream.AckExplicitPolicy, DeliverSubject: deliver, DeliverGroup: "any-name"})
	if err != nil {
		t.Fatal(err)
	}
	acme, globex := s.connect("acme-c"), s.connect("globex-c")
	if subRefused(t, acme, deliver) || !subRefused(t, globex, deliver) {
		t.Fatal("acme's deliveries: acme's consumer refused, or globex's allowed")
	}
	sub, err := acme.QueueSubscribeSync(deliver, "any-name")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "sluice.hooks.acme.src", []byte("acme")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !pubRefused(t, globex, m.Reply) {
		t.Error("globex's consumer acked acme's hook")
	}
	if pubRefused(t, acme, m.Reply) {
		t.Fatal("acme's consumer refused the ack of its own hook")
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == 1
	}, "the hook acked")
}
