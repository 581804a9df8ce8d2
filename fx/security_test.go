package sluicefx_test

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	p := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
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
