package sluicefx_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

// startLogged starts an app with args and returns its log.
func startLogged(t *testing.T, args ...string) *testkit.LogBuffer {
	t.Helper()
	cfg, err := config.Parse(append([]string{"--http-addr", "127.0.0.1:0", "--partitions", "4", "--nats-listen", "off", "--data-dir", t.TempDir()}, args...),
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	buf := &testkit.LogBuffer{}
	app := fxtest.New(t, sluicefx.Options(cfg, slog.New(slog.NewTextHandler(buf, nil))))
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

// TestEmbeddedNKeyAndTLS: --nats-nkey and --nats-tls-* are enforced by the
// embedded server (they used to be ignored): an anonymous or plaintext
// client is refused; one with the nkey over TLS is served, and the app
// itself (in-process) still runs.
func TestEmbeddedNKeyAndTLS(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	seedFile := testkit.WriteTemp(t, "edge.nk", seed)
	p := testkit.NewPKI(t)
	cert, key := p.Issue("nats")
	port := testkit.FreePort(t)
	h, _, _ := start(t, "--data-dir", t.TempDir(), "--nats-listen", fmt.Sprintf("0.0.0.0:%d", port),
		"--nats-nkey", seedFile, "--nats-tls-cert", cert, "--nats-tls-key", key)
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
