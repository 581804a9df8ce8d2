package natsembed_test

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/testkit"
)

func start(t *testing.T, cfg natsembed.ServerConfig) *natsembed.Server {
	t.Helper()
	cfg.StoreDir = t.TempDir()
	s, err := natsembed.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// TestNKeyClients: with NKeySeedFile, TCP clients must sign in with that
// nkey; anonymous, other nkeys and in-process Connect behave accordingly.
func TestNKeyClients(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	seedFile := testkit.WriteTemp(t, "user.nk", seed)
	s := start(t, natsembed.ServerConfig{Listen: "127.0.0.1:0", NKeySeedFile: seedFile})
	if nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("anonymous client accepted")
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	opt, err := nats.NkeyOptionFromSeed(testkit.WriteTemp(t, "other.nk", otherSeed))
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(s.ClientURL(), opt, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("client with another nkey accepted")
	}
	opt, _ = nats.NkeyOptionFromSeed(seedFile)
	nc, err := nats.Connect(s.ClientURL(), opt)
	if err != nil {
		t.Fatalf("nkey client refused: %v", err)
	}
	nc.Close()
	in, err := s.Connect()
	if err != nil {
		t.Fatalf("in-process connect: %v", err)
	}
	in.Close()
	// A file that is not a user seed is a start-up error.
	_, err = natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), NKeySeedFile: testkit.WriteTemp(t, "bad.nk", []byte("SUnot-a-seed"))})
	if err == nil {
		t.Fatal("bad seed accepted")
	}
}

// TestTLSClients: with TLSCert/TLSKey clients must use TLS; with TLSCA they
// must also present a certificate it signed.
func TestTLSClients(t *testing.T) {
	p := testkit.NewPKI(t)
	cert, key := p.Issue("server")
	s := start(t, natsembed.ServerConfig{Listen: "127.0.0.1:0", TLSCert: cert, TLSKey: key, TLSCA: p.CAFile})
	url := strings.Replace(s.ClientURL(), "nats://", "tls://", 1)
	if nc, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("plaintext client accepted")
	}
	if nc, err := nats.Connect(url, nats.Secure(&tls.Config{RootCAs: p.Pool, MinVersion: tls.VersionTLS12}), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("TLS client without a certificate accepted")
	}
	ccert, ckey := p.Issue("client")
	nc, err := nats.Connect(url, nats.RootCAs(p.CAFile), nats.ClientCert(ccert, ckey))
	if err != nil {
		t.Fatalf("mutual TLS client refused: %v", err)
	}
	if !nc.TLSRequired() {
		t.Fatal("connection is not TLS")
	}
	nc.Close()
	in, err := s.Connect()
	if err != nil {
		t.Fatalf("in-process connect: %v", err)
	}
	in.Close()
}

// routeConnect speaks the route protocol to addr with the given credentials
// ("" user: none) and returns the server's answer to CONNECT+PING.
func routeConnect(t *testing.T, addr, user, pass string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		return fmt.Sprintf("no INFO: %q %v", line, err) // e.g. a TLS-only listener hanging up
	}
	creds := ""
	if user != "" {
		creds = fmt.Sprintf(`"user":%q,"pass":%q,`, user, pass)
	}
	if _, err := fmt.Fprintf(c, "CONNECT {%s\"verbose\":false,\"pedantic\":false,\"name\":\"intruder\",\"cluster\":\"sluice\"}\r\nPING\r\n", creds); err != nil {
		t.Fatal(err)
	}
	line, _ := r.ReadString('\n')
	return line
}

// startPair starts two clustered servers routed to each other, at once (a
// clustered JetStream server is ready only with a quorum).
func startPair(t *testing.T, a, b natsembed.ServerConfig) (*natsembed.Server, *natsembed.Server) {
	t.Helper()
	pa, pb := testkit.FreePort(t), testkit.FreePort(t)
	a.Name, a.ClusterListen, a.Routes = "a", fmt.Sprintf("127.0.0.1:%d", pa), []string{fmt.Sprintf("nats-route://127.0.0.1:%d", pb)}
	b.Name, b.ClusterListen, b.Routes = "b", fmt.Sprintf("127.0.0.1:%d", pb), []string{fmt.Sprintf("nats-route://127.0.0.1:%d", pa)}
	var sb *natsembed.Server
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.StoreDir = t.TempDir()
		s, err := natsembed.StartServer(b)
		if err != nil {
			t.Errorf("b: %v", err)
			return
		}
		sb = s
	}()
	sa := start(t, a)
	<-done
	if sb == nil {
		t.FailNow()
	}
	t.Cleanup(sb.Shutdown)
	testkit.Eventually(t, 10*time.Second, func() bool { return sa.NATS().NumRoutes() > 0 && sb.NATS().NumRoutes() > 0 }, "a and b routed")
	return sa, sb
}

// TestRouteAuth: with ClusterToken two nodes with the token form a
// cluster, and a route without it is refused (with it, the same probe is
// answered).
func TestRouteAuth(t *testing.T) {
	const token = "route-token-0123456789"
	a, _ := startPair(t, natsembed.ServerConfig{ClusterToken: token}, natsembed.ServerConfig{ClusterToken: token})
	if got := routeConnect(t, a.ClusterAddr(), "", ""); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("unauthenticated route: %q, want an authorization violation", got)
	}
	if got := routeConnect(t, a.ClusterAddr(), natsembed.RouteUser, "wrong-token-0123456789"); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("route with a wrong token: %q", got)
	}
	if got := routeConnect(t, a.ClusterAddr(), natsembed.RouteUser, token); !strings.HasPrefix(got, "PONG") {
		t.Fatalf("route with the token: %q, want PONG", got)
	}
}

// TestRouteTLS: with route TLS, nodes with certificates from the CA form a
// cluster; a plaintext route is refused.
func TestRouteTLS(t *testing.T) {
	p := testkit.NewPKI(t)
	ca, ka := p.Issue("a")
	cb, kb := p.Issue("b")
	a, _ := startPair(t,
		natsembed.ServerConfig{ClusterTLSCert: ca, ClusterTLSKey: ka, ClusterTLSCA: p.CAFile},
		natsembed.ServerConfig{ClusterTLSCert: cb, ClusterTLSKey: kb, ClusterTLSCA: p.CAFile})
	if got := routeConnect(t, a.ClusterAddr(), "", ""); strings.Contains(got, "PONG") {
		t.Fatalf("plaintext route accepted: %q", got)
	}
}

// TestMappingsKeepPermissions: a subject mapping (a hub's, for its leaves'
// owner subjects) delivers to the mapped subject, and a user may publish
// through it only what it may publish to the mapped subject: nats-server
// checks permissions after mapping.
func TestMappingsKeepPermissions(t *testing.T) {
	s := start(t, natsembed.ServerConfig{
		Listen:   "127.0.0.1:0",
		Mappings: map[string]string{"x.hub.p.*": "x.p.{{wildcard(1)}}"},
		Users: []natsembed.User{
			{Name: "owner", Password: "owner-secret", Publish: []string{"x.p.>", "x.hub.>"}, Subscribe: []string{"x.p.>", "_INBOX.>"}},
			{Name: "other", Password: "other-secret", Publish: []string{"x.hub.>"}, Subscribe: []string{"_INBOX.>"}},
		},
	})
	sub, err := s.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	got := make(chan string, 4)
	if _, err := sub.Subscribe("x.p.*", func(m *nats.Msg) { got <- m.Subject + " " + string(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	publish := func(user, pass, data string) {
		t.Helper()
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, pass))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := nc.Publish("x.hub.p.3", []byte(data)); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
	}
	publish("owner", "owner-secret", "allowed")
	next := func(want, wrong, missing string) {
		t.Helper()
		select {
		case m := <-got:
			if m != want {
				t.Fatalf("delivered %q: %s", m, wrong)
			}
		case <-time.After(5 * time.Second):
			t.Fatal(missing)
		}
	}
	next("x.p.3 allowed", "want x.p.3 allowed", "the mapped message did not arrive")
	publish("other", "other-secret", "denied")
	publish("owner", "owner-secret", "marker")
	next("x.p.3 marker", "a user without x.p.> published through the mapping", "the marker did not arrive")
	if _, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir(), Mappings: map[string]string{"a.*": "b.{{wildcard(2)}}"}}); err == nil {
		t.Fatal("a mapping with a bad wildcard index was accepted")
	}
}
