package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// app is a running edge: the real fx app on an embedded server in a
// temporary directory, HTTP on a random loopback port.
type app struct {
	t    testing.TB
	url  string
	nats *sluicefx.NATS
	http *sluicefx.HTTP
	fx   *fxtest.App
	dir  string
}

// startApp starts the edge with the YAML configuration and extra flags.
func startApp(t testing.TB, yaml string, args ...string) *app {
	t.Helper()
	dir := t.TempDir()
	return startAppIn(t, dir, yaml, args...)
}

// startAcme starts the edge with one tenant, acme, whose sources are the
// YAML mapping sources (a source a line at column 0, its fields indented
// under it), and extra flags.
func startAcme(t testing.TB, sources string, args ...string) *app {
	t.Helper()
	var b strings.Builder
	b.WriteString("tenants:\n  acme:\n    sources:\n")
	for _, l := range strings.Split(strings.TrimPrefix(sources, "\n"), "\n") {
		if l != "" {
			b.WriteString("      " + l + "\n")
		}
	}
	return startApp(t, b.String(), args...)
}

func startAppIn(t testing.TB, dir, yaml string, args ...string) *app {
	t.Helper()
	return startAppWith(t, dir, yaml, nil, args...)
}

// startAppWith is startAppIn with more fx options (a decorator of a seam).
func startAppWith(t testing.TB, dir, yaml string, opts []fx.Option, args ...string) *app {
	t.Helper()
	cfgPath := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{
		"--config", cfgPath,
		"--data-dir", filepath.Join(dir, "data"),
		"--nats-listen", "off",
		"--http-addr", "127.0.0.1:0",
		"--partitions", "4",
	}
	cfg, err := config.Parse(append(base, args...), nil, nil)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a := &app{t: t, dir: dir}
	a.fx = fxtest.New(t, append([]fx.Option{sluicefx.Options(context.Background(), cfg, testkit.Log()), fx.Populate(&a.nats, &a.http)}, opts...)...)
	a.fx.RequireStart()
	t.Cleanup(a.fx.RequireStop)
	a.url = "http://" + *a.http.Addr.Load()
	// Wait until this node serves its partitions (single node: all of them).
	if err := testkit.WaitHTTP(a.url+"/readyz", 10*time.Second); err != nil {
		t.Fatalf("edge not ready: %v", err)
	}
	return a
}

type resp struct {
	code int
	hdr  http.Header
	body map[string]any
	raw  string
}

func (a *app) post(path string, body []byte, hdr map[string]string) resp {
	a.t.Helper()
	return asResp(testkit.HTTP(a.t, http.MethodPost, a.url+path, body, hdr))
}

func (a *app) do(req *http.Request) resp {
	a.t.Helper()
	return asResp(testkit.Do(a.t, req))
}

// asResp is r with its body decoded, if it is a JSON object.
func asResp(r testkit.Response) resp {
	out := resp{code: r.Code, hdr: r.Header, raw: string(r.Body)}
	_ = json.Unmarshal(r.Body, &out.body)
	return out
}

// stored returns the hooks in the stream, by hook id.
func (a *app) stored() map[string]*jetstream.RawStreamMsg {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := a.nats.JS.Stream(ctx, "HOOKS")
	if err != nil {
		a.t.Fatal(err)
	}
	out := map[string]*jetstream.RawStreamMsg{}
	for _, m := range testkit.StoredMsgs(a.t, st) {
		id := m.Header.Get("Sluice-Hook-Id")
		if _, dup := out[id]; dup {
			a.t.Fatalf("hook %s stored twice", id)
		}
		out[id] = m
	}
	return out
}

func mustStatus(t testing.TB, r resp, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d; body %s; headers %v", r.code, code, r.raw, r.hdr)
	}
	if r.hdr.Get("X-Request-Id") == "" {
		t.Fatalf("no X-Request-Id on a %d", r.code)
	}
}

func str(v any) string { return fmt.Sprint(v) }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
