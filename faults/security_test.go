package faults

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/webhook"
)

// app is one edge in this process with its embedded server.
type app struct {
	url  string
	nats *sluicefx.NATS
	http *sluicefx.HTTP
	fx   *fxtest.App
}

// startApp starts a single edge (embedded server, data in a temporary
// directory, HTTP on a random loopback port) with yaml, env and args.
func startApp(t *testing.T, yaml string, env map[string]string, log *slog.Logger, args ...string) *app {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--config", cfgPath, "--data-dir", filepath.Join(dir, "data"), "--http-addr", "127.0.0.1:0", "--partitions", "4"}
	cfg, err := config.Parse(append(base, args...), func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &app{}
	a.fx = fxtest.New(t, sluicefx.Options(context.Background(), cfg, log), fx.Populate(&a.nats, &a.http))
	a.fx.RequireStart()
	t.Cleanup(a.fx.RequireStop)
	scheme := "http"
	if cfg.TLSCert != "" {
		scheme = "https"
	}
	a.url = scheme + "://" + *a.http.Addr.Load()
	return a
}

// TestListenDefaults: the edge's listeners default to loopback, an empty
// host binds loopback too, and the embedded server opens no monitoring
// port.
func TestListenDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := config.Parse(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATSListen != "127.0.0.1:4222" || cfg.HTTPAddr != "127.0.0.1:8080" {
		t.Errorf("defaults: --nats-listen %q, --http-addr %q; want 127.0.0.1:4222 and 127.0.0.1:8080", cfg.NATSListen, cfg.HTTPAddr)
	}
	if cfg.ClusterListen != "" || cfg.NATSURL != "" || cfg.AdminToken.IsSet() {
		t.Errorf("defaults: cluster listen %q, nats url %q, admin token set %v", cfg.ClusterListen, cfg.NATSURL, cfg.AdminToken.IsSet())
	}
	// An empty host is refused without auth (config cannot tell it binds
	// loopback); with a token it binds loopback.
	if _, err := config.Parse([]string{"--nats-listen", ":0"}, nil, nil); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("--nats-listen :0 without auth: %v, want refused", err)
	}
	tokenConf := writeNATSConf(t, fmt.Sprintf("authorization { token: %q }", strings.Repeat("t", 32)))
	for _, args := range [][]string{{"--nats-listen", "127.0.0.1:0"}, {"--nats-listen", ":0", "--nats-config", tokenConf}} {
		listen := args[1]
		a := startApp(t, baseYAML, nil, nil, args...)
		ns := a.nats.Server.NATS()
		addr, ok := ns.Addr().(*net.TCPAddr)
		if !ok || !addr.IP.IsLoopback() {
			t.Errorf("--nats-listen %s: the server listens on %v, want loopback", listen, ns.Addr())
		}
		if ns.MonitorAddr() != nil {
			t.Errorf("--nats-listen %s: a monitoring port is open: %v", listen, ns.MonitorAddr())
		}
		if ns.ClusterAddr() != nil {
			t.Errorf("--nats-listen %s: a route port is open: %v", listen, ns.ClusterAddr())
		}
	}
	a := startApp(t, baseYAML, nil, nil, "--nats-listen", "off")
	if u := a.nats.Server.ClientURL(); u != "" || a.nats.Server.NATS().Addr() != nil {
		t.Errorf("--nats-listen off: client URL %q, address %v", u, a.nats.Server.NATS().Addr())
	}
}

// TestEmbeddedNATSAuth: with a user or a token in the embedded server's
// --nats-config, a connection without (or with wrong)
// credentials is refused, and the edge itself still works.
func TestEmbeddedNATSAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		good  nats.Option
		wrong nats.Option
	}{
		{"user", []string{"--nats-config", writeNATSConf(t, `authorization { user: edge, password: "pw-0123456789" }`)}, nats.UserInfo("edge", "pw-0123456789"), nats.UserInfo("edge", "pw-wrong")},
		{"token", []string{"--nats-config", writeNATSConf(t, `authorization { token: "tok-0123456789" }`)}, nats.Token("tok-0123456789"), nats.Token("tok-wrong")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := startApp(t, baseYAML, nil, nil, append([]string{"--nats-listen", "127.0.0.1:0"}, tc.args...)...)
			u := a.nats.Server.ClientURL()
			for what, opt := range map[string]nats.Option{"no credentials": nil, "wrong credentials": tc.wrong} {
				opts := []nats.Option{nats.Timeout(2 * time.Second), nats.MaxReconnects(0)}
				if opt != nil {
					opts = append(opts, opt)
				}
				if nc, err := nats.Connect(u, opts...); err == nil {
					nc.Close()
					t.Errorf("%s: connected with %s", u, what)
				} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
					t.Errorf("%s with %s: %v, want an authorization error", u, what, err)
				}
			}
			nc, err := nats.Connect(u, tc.good, nats.Timeout(2*time.Second))
			if err != nil {
				t.Fatalf("with the right credentials: %v", err)
			}
			nc.Close()
			res, err := http.Post(a.url+"/v1/hooks/t/s", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 202 {
				t.Errorf("hook with auth on the embedded server: %d", res.StatusCode)
			}
		})
	}
}

// TestAdminToken: without the token, with a wrong one, a prefix of it, a
// longer one, or another scheme, every admin endpoint answers 401 and
// changes nothing. (The comparison is sha256 + subtle.ConstantTimeCompare
// in edge/admin.go; a timing test over HTTP would measure noise, so the
// constant-time property is left to that code.)
func TestAdminToken(t *testing.T) {
	t.Parallel()
	const token = "admin-0123456789abcdef"
	a := startApp(t, baseYAML, nil, nil, "--nats-listen", "off", "--admin-token", token)
	do := func(method, path, auth, body string) int {
		req, _ := http.NewRequest(method, a.url+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	paths := []struct{ method, path, body string }{
		{"GET", "/v1/admin/tenants/t/limits", ""},
		{"PUT", "/v1/admin/tenants/t/limits", `{"hooks":{"rate":1,"burst":1}}`},
		{"DELETE", "/v1/admin/tenants/t/limits", ""},
		{"GET", "/v1/admin/claims/t/s/k", ""},
		{"GET", "/v1/admin/nothing", ""},
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer x", "Bearer " + token[:len(token)-1], "Bearer " + token + "0",
		"Basic " + token, token, "Bearer " + strings.ToUpper(token), "Bearer " + token + " " + token} {
		for _, p := range paths {
			if code := do(p.method, p.path, auth, p.body); code != 401 {
				t.Errorf("%s %s with Authorization %q: %d, want 401", p.method, p.path, auth, code)
			}
		}
	}
	// Nothing was changed: the limits still come from the default.
	if r := testkit.HTTP(t, "GET", a.url+"/v1/admin/tenants/t/limits", nil, map[string]string{"Authorization": "Bearer " + token}); r.Code != 200 || !strings.Contains(string(r.Body), `"origin":"default"`) {
		t.Errorf("with the token: %d %s", r.Code, r.Body)
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "sluice test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestHTTPS: with --tls-cert and --tls-key the edge serves HTTPS (TLS 1.2
// at least) and stores hooks; plain HTTP to the same port never gets a 2xx.
func TestHTTPS(t *testing.T) {
	t.Parallel()
	certFile, keyFile, pool := selfSigned(t)
	a := startApp(t, baseYAML, nil, nil, "--nats-listen", "off", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(a.url, "https://") {
		t.Fatalf("url %s", a.url)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	res, err := client.Post(a.url+"/v1/hooks/t/s", "application/json", strings.NewReader(`{"tls":true}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 202 || res.TLS == nil || res.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("HTTPS hook: %d, TLS %+v", res.StatusCode, res.TLS)
	}
	// TLS 1.1 and below are refused.
	old := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS11}}
	defer old.CloseIdleConnections()
	if res, err := (&http.Client{Transport: old, Timeout: 5 * time.Second}).Get(a.url + "/healthz"); err == nil {
		res.Body.Close()
		t.Errorf("TLS 1.1 handshake accepted")
	}
	// Plain HTTP to the TLS port: an error or a 400, never a 2xx.
	plain := &http.Transport{}
	defer plain.CloseIdleConnections()
	u, _ := url.Parse(a.url)
	res, err = (&http.Client{Transport: plain, Timeout: 5 * time.Second}).Post("http://"+u.Host+"/v1/hooks/t/s", "application/json", strings.NewReader(`{}`))
	if err == nil {
		res.Body.Close()
		if res.StatusCode/100 == 2 {
			t.Errorf("plain HTTP to the HTTPS port: %d", res.StatusCode)
		}
	}
}

// TestSecretsNotLogged runs a whole app at debug level — the embedded
// server with client auth, signed and forged hooks, admin calls with right
// and wrong tokens, NATS connections with right and wrong credentials, the
// shutdown — and finds none of the secrets in the log.
func TestSecretsNotLogged(t *testing.T) {
	t.Parallel()
	const (
		ghSecret     = "gh-secret-5f1e2d3c4b5a6978"
		stripeSecret = "whsec_stripe-secret-8a7b6c5d4e"
		adminToken   = "admin-token-1a2b3c4d5e6f7a8b"
		natsPassword = "nats-password-9f8e7d6c5b4a"
		natsToken    = "nats-token-0a1b2c3d4e5f6a7b"
	)
	yaml := fmt.Sprintf(`allow_unknown: true
tenants:
  acme:
    sources:
      gh: {dedupe: github, verify: github, secret: %q}
      pay: {dedupe: stripe, verify: stripe, secret_env: STRIPE_SECRET}
`, ghSecret)
	env := map[string]string{"STRIPE_SECRET": stripeSecret}
	for _, tc := range []struct {
		name string
		auth []string
		good nats.Option
		bad  nats.Option
	}{
		{"user", []string{"--nats-config", writeNATSConf(t, fmt.Sprintf("authorization { user: edge, password: %q }", natsPassword))}, nats.UserInfo("edge", natsPassword), nats.UserInfo("edge", natsPassword+"x")},
		{"token", []string{"--nats-config", writeNATSConf(t, fmt.Sprintf("authorization { token: %q }", natsToken))}, nats.Token(natsToken), nats.Token(natsToken + "x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			buf := &testkit.LogBuffer{}
			log := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			args := append([]string{"--nats-listen", "127.0.0.1:0", "--admin-token", adminToken, "--log-level", "debug"}, tc.auth...)
			a := startApp(t, yaml, env, log, args...)
			post := func(path string, body []byte, hdr map[string]string) int {
				return testkit.HTTP(t, "POST", a.url+path, body, hdr).Code
			}
			body := []byte(`{"id":"evt_1","x":1}`)
			if c := post("/v1/hooks/acme/gh", body, map[string]string{"X-GitHub-Delivery": "d1", "X-Hub-Signature-256": webhook.SignGitHub(ghSecret, body)}); c != 202 {
				t.Errorf("signed github hook: %d", c)
			}
			if c := post("/v1/hooks/acme/gh", body, map[string]string{"X-GitHub-Delivery": "d2", "X-Hub-Signature-256": webhook.SignGitHub("wrong", body)}); c != 401 {
				t.Errorf("forged github hook: %d", c)
			}
			if c := post("/v1/hooks/acme/pay", body, map[string]string{"Stripe-Signature": webhook.SignStripe(stripeSecret, time.Now().Unix(), body)}); c != 202 {
				t.Errorf("signed stripe hook: %d", c)
			}
			if c := post("/v1/hooks/acme/pay", body, map[string]string{"Stripe-Signature": webhook.SignStripe("whsec_wrong", time.Now().Unix(), body)}); c != 401 {
				t.Errorf("forged stripe hook: %d", c)
			}
			for _, tok := range []string{adminToken, adminToken + "x"} {
				req, _ := http.NewRequest("PUT", a.url+"/v1/admin/tenants/acme/limits", strings.NewReader(`{"hooks":{"rate":50,"burst":100}}`))
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
			}
			u := a.nats.Server.ClientURL()
			for _, opt := range []nats.Option{tc.bad, nil, tc.good} {
				opts := []nats.Option{nats.Timeout(2 * time.Second), nats.MaxReconnects(0)}
				if opt != nil {
					opts = append(opts, opt)
				}
				if nc, err := nats.Connect(u, opts...); err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					_, _ = nc.RequestWithContext(ctx, "sluice.v1.quota.count", []byte(`{"principal":"acme","key":"k"}`))
					cancel()
					nc.Close()
				}
			}
			a.fx.RequireStop()
			out := buf.String()
			if len(out) < 1000 {
				t.Fatalf("only %d bytes of log: the capture is broken", len(out))
			}
			for name, secret := range map[string]string{"github secret": ghSecret, "stripe secret": stripeSecret, "admin token": adminToken, "nats password": natsPassword, "nats token": natsToken} {
				if strings.Contains(out, secret) {
					i := strings.Index(out, secret)
					t.Errorf("the log holds the %s: …%s…", name, out[max(0, i-200):min(len(out), i+len(secret)+50)])
				}
			}
			t.Logf("%d bytes of debug log checked", len(out))
		})
	}
}

// startFuzzServiceApp starts one app for a fuzz target and returns its
// in-process connection.
func startFuzzServiceApp(f *testing.F) *nats.Conn {
	f.Helper()
	dir := f.TempDir()
	cfg, err := config.Parse([]string{"--data-dir", filepath.Join(dir, "data"), "--nats-listen", "off",
		"--http-addr", "127.0.0.1:0", "--partitions", "4", "--replay-capacity", "1000"}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	var nc *sluicefx.NATS
	app := fxtest.New(f, sluicefx.Options(context.Background(), cfg, slog.New(slog.DiscardHandler)), fx.Populate(&nc))
	app.RequireStart()
	f.Cleanup(app.RequireStop)
	return nc.Conn
}
