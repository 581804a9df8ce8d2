package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/node"
	"github.com/sluice-dev/sluice/webhook"
)

// post sends a hook (GitHub-signed with secret unless "") and returns the
// status.
func post(t *testing.T, base, path, secret string) int {
	t.Helper()
	body := []byte(fmt.Sprintf(`{"at":%d}`, time.Now().UnixNano()))
	hdr := map[string]string{}
	if secret != "" {
		hdr[webhook.HeaderGitHubSignature] = webhook.SignGitHub(secret, body)
	}
	return testkit.HTTP(t, "POST", base+path, body, hdr).Code
}

// adminToken is the admin token of startAdminNode's node.
const adminToken = "cli-admin-token-0123456789abcdef"

// startAdminNode starts a node with the admin API (adminToken) and a
// secrets key file, for `edge tenants`.
func startAdminNode(t *testing.T) *node.Node {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return node.Start(t, testkit.New(t), "--admin-token", adminToken,
		"--secrets-key-file", testkit.WriteTemp(t, "keys", []byte("k1 "+base64.StdEncoding.EncodeToString(key))))
}

// tenantsRunner returns cli(want, args...): `edge tenants args` with env,
// its stdout and stderr; t fails unless it exits want, or when the output
// holds any of secrets.
func tenantsRunner(t *testing.T, env map[string]string, secrets ...string) func(want int, args ...string) string {
	return adminRunner(t, "edge tenants", runTenants, env, secrets...)
}

// adminRunner is tenantsRunner for the command name run by run (runTenants,
// runConsumers).
func adminRunner(t *testing.T, name string, run func(context.Context, []string, func(string) string, io.Writer, io.Writer) int,
	env map[string]string, secrets ...string) func(want int, args ...string) string {
	var out, errb bytes.Buffer
	return func(want int, args ...string) string {
		t.Helper()
		out.Reset()
		errb.Reset()
		if code := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errb); code != want {
			t.Fatalf("%s %v: exit %d, want %d\nstdout: %s\nstderr: %s", name, args, code, want, out.String(), errb.String())
		}
		for _, s := range secrets {
			if strings.Contains(out.String()+errb.String(), s) {
				t.Fatalf("%s %v printed a secret", name, args)
			}
		}
		return out.String() + errb.String()
	}
}

// TestTenantsCLI: onboarding, listing, rotating and removing a tenant
// with `edge tenants` against a running node; no secret is ever printed.
func TestTenantsCLI(t *testing.T) {
	n := startAdminNode(t)
	const oldS, newS = "cli-old-secret-abcdefghijk", "cli-new-secret-zyxwvutsrqp"
	env := map[string]string{envAdminURL: n.URL, envAdminToken: adminToken, "GH_SECRET": oldS, "GH_NEW": newS}
	cli := tenantsRunner(t, env, oldS, newS, adminToken)
	if got := cli(0, "add", "acme", "--source", "gh", "--verify", "github", "--dedupe", "github", "--secret-env", "GH_SECRET", "--tenant-hooks", "100:200"); !strings.Contains(got, `"fingerprint": "hmac-sha256:`) {
		t.Fatalf("add: %s", got)
	}
	if code := post(t, n.URL, "/v1/hooks/acme/gh", oldS); code != 202 {
		t.Fatalf("signed hook after add: %d", code)
	}
	if got := cli(0, "list"); !strings.Contains(got, "acme") || !strings.Contains(got, "api") || !strings.Contains(got, "gh") {
		t.Fatalf("list: %s", got)
	}
	if got := cli(1, "add", "acme"); !strings.Contains(got, "tenant_exists") {
		t.Fatalf("second add: %s", got)
	}
	cli(0, "rotate", "acme", "gh", "--secret-env", "GH_NEW", "--overlap", "0s")
	if a, b := post(t, n.URL, "/v1/hooks/acme/gh", oldS), post(t, n.URL, "/v1/hooks/acme/gh", newS); a != 401 || b != 202 {
		t.Fatalf("after rotate: old %d new %d", a, b)
	}
	cli(0, "retire", "acme", "gh", "s1")
	if got := cli(1, "retire", "acme", "gh", "s2"); !strings.Contains(got, "400") {
		t.Fatalf("retiring the last secret: %s", got)
	}
	cli(0, "set-source", "acme", "raw", "--dedupe", "none", "--hooks", "5:10")
	if got := cli(0, "get", "acme"); !strings.Contains(got, `"raw"`) {
		t.Fatalf("get: %s", got)
	}
	cli(0, "rm", "acme", "gh")
	if code := post(t, n.URL, "/v1/hooks/acme/gh", newS); code != 404 {
		t.Fatalf("removed source: %d", code)
	}
	if got := cli(0, "reseal"); !strings.Contains(got, `"resealed": 0`) {
		t.Fatalf("reseal: %s", got)
	}
	cli(0, "rm", "acme")
	cli(1, "get", "acme")
	// Usage errors.
	delete(env, envAdminToken)
	cli(2, "list")
	env[envAdminToken] = adminToken
	cli(2, "frobnicate")
	cli(2, "rm")
	cli(1, "add", "x", "--verify", "github")
	cli(1, "set-source", "x", "y", "--secret-env", "UNSET")
	cli(1, "add", "x", "--tenant-hooks", "fast")
}

// TestSIGHUPReload: a SIGHUP re-reads the file; a broken file changes
// nothing and its error (with the line) is logged; a good one applies at
// once and the log says what changed. It re-reads the key file too: a
// secret sealed with the old key no longer opens once the file holds only
// a new key, which seals and opens a secret written after it; a broken key
// file keeps the running keys.
func TestSIGHUPReload(t *testing.T) {
	file := testkit.WriteTemp(t, "edge.yaml", []byte("tenants:\n  acme:\n    sources: {gh: {}}\n"))
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keys := testkit.WriteTemp(t, "keys", []byte("k1 "+base64.StdEncoding.EncodeToString(key)))
	addr := testkit.FreeAddr(t)
	log := &testkit.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	go func() {
		exited <- Run(ctx, []string{"--config", file, "--secrets-key-file", keys, "--http-addr", addr, "--nats-listen", "off", "--data-dir", t.TempDir(), "--partitions", "4", "--admin-token", adminToken},
			func(string) string { return "" }, log)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("exit %d\n%s", code, log.String())
		}
	})
	base := "http://" + addr
	if err := testkit.WaitHTTP(base+"/readyz", 30*time.Second); err != nil {
		t.Fatalf("edge not ready: %v\n%s", err, log.String())
	}
	// reload writes content to path and sends the process a SIGHUP.
	reload := func(path, content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	// logged waits until the log holds every one of lines.
	logged := func(what string, lines ...string) {
		t.Helper()
		testkit.Eventually(t, 5*time.Second, func() bool {
			for _, l := range lines {
				if !strings.Contains(log.String(), l) {
					return false
				}
			}
			return true
		}, what)
	}
	if a, b := post(t, base, "/v1/hooks/acme/gh", ""), post(t, base, "/v1/hooks/acme/new", ""); a != 202 || b != 404 {
		t.Fatalf("before: gh %d new %d", a, b)
	}
	reload(file, "tenants:\n  acme:\n    sources:\n      gh: {bogus: 1}\n      new: {}\n")
	logged("the broken file's error logged with its line", "reload failed: keeping the running configuration", "line 4: unknown field tenants.acme.sources.gh.bogus")
	if a, b := post(t, base, "/v1/hooks/acme/gh", ""), post(t, base, "/v1/hooks/acme/new", ""); a != 202 || b != 404 {
		t.Fatalf("after a broken reload: gh %d new %d", a, b)
	}
	reload(file, "tenants:\n  acme:\n    sources: {gh: {}, new: {}}\n")
	testkit.Eventually(t, 5*time.Second, func() bool { return post(t, base, "/v1/hooks/acme/new", "") == 202 }, "new source served after the reload")
	if !strings.Contains(log.String(), "tenants.acme changed: [sources.new added]") {
		t.Fatalf("reload log:\n%s", log.String())
	}

	// The key file: a source whose secret the admin API sealed with k1.
	admin := func(method, path, body string, want int) {
		t.Helper()
		if r := testkit.HTTP(t, method, base+path, []byte(body), map[string]string{"Authorization": "Bearer " + adminToken}); r.Code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, r.Code, r.Body, want)
		}
	}
	const sealedK1, sealedK2 = "vault-secret-sealed-with-k1-0123", "vault-secret-sealed-with-k2-0123"
	admin("PUT", "/v1/admin/tenants/vault", `{}`, 201)
	admin("PUT", "/v1/admin/tenants/vault/sources/k1", `{"verify":"github","secret":"`+sealedK1+`"}`, 200)
	testkit.Eventually(t, 5*time.Second, func() bool { return post(t, base, "/v1/hooks/vault/k1", sealedK1) == 202 }, "the k1-sealed source served")
	key2 := make([]byte, 32)
	_, _ = rand.Read(key2)
	reload(keys, "k2 "+base64.StdEncoding.EncodeToString(key2))
	testkit.Eventually(t, 5*time.Second, func() bool { return post(t, base, "/v1/hooks/vault/k1", sealedK1) == 503 }, "the k1-sealed secret fails closed once the key file holds only k2")
	admin("PUT", "/v1/admin/tenants/vault/sources/k2", `{"verify":"github","secret":"`+sealedK2+`"}`, 200)
	testkit.Eventually(t, 5*time.Second, func() bool { return post(t, base, "/v1/hooks/vault/k2", sealedK2) == 202 }, "a secret sealed with k2, which only k2 opens, served")

	// A broken key file keeps the running keys.
	reload(keys, "k1 short\n")
	logged("the broken key file's reload done (its error logged)", "reload: keeping the running secrets keys", "line 1: key k1")
	if a, b := post(t, base, "/v1/hooks/vault/k2", sealedK2), post(t, base, "/v1/hooks/vault/k1", sealedK1); a != 202 || b != 503 {
		t.Fatalf("after a broken key file: the k2 secret %d (want 202), the k1 secret %d (want 503)", a, b)
	}
}

// TestBadKeyFileRefusesToStart: a --secrets-key-file that does not load
// fails start-up, naming the line and never the key.
func TestBadKeyFileRefusesToStart(t *testing.T) {
	keys := testkit.WriteTemp(t, "keys", []byte("# keys\nk1 c2hvcnQta2V5\n"))
	log := &testkit.LogBuffer{}
	dataDir := t.TempDir()
	code := Run(context.Background(), []string{"--secrets-key-file", keys, "--http-addr", "127.0.0.1:0", "--nats-listen", "off", "--data-dir", dataDir, "--partitions", "4"},
		func(string) string { return "" }, log)
	if code != 1 || !strings.Contains(log.String(), "line 2: key k1") || strings.Contains(log.String(), "c2hvcnQta2V5") {
		t.Fatalf("exit %d:\n%s", code, log.String())
	}
	// What the constructors before the failing one started is stopped:
	// the data-dir lock is free (and the embedded server gone: TestMain's
	// leak check).
	unlock, err := natsembed.LockDir(dataDir)
	if err != nil {
		t.Fatalf("after a failed start-up: %v", err)
	}
	unlock()
}

// TestTenantsVerifyFile: `--verify-file` takes a declarative scheme as
// the config file writes it — a custom HMAC scheme, or a preset with
// fields overridden — and the source verifies by it; a wrong field is
// refused before anything is sent, naming the field.
func TestTenantsVerifyFile(t *testing.T) {
	n := startAdminNode(t)
	const secret = "verify-file-secret-0123456789"
	env := map[string]string{envAdminURL: n.URL, envAdminToken: adminToken, "S": secret}
	cli := tenantsRunner(t, env, secret, adminToken)
	send := func(path string, hdr map[string]string, body []byte) int {
		t.Helper()
		return testkit.HTTP(t, "POST", n.URL+path, body, hdr).Code
	}
	custom := testkit.WriteTemp(t, "scheme.yaml", []byte(`
name: acme-signer
type: hmac
algorithm: hmac-sha256
header: X-Acme-Signature
format: single
prefix: "sha256="
encoding: hex
signed: "{body}"
`))
	got := cli(0, "add", "acme", "--source", "s", "--verify-file", custom, "--secret-env", "S")
	if !strings.Contains(got, `"scheme": "hmac"`) || !strings.Contains(got, `"header": "X-Acme-Signature"`) || !strings.Contains(got, `"name": "acme-signer"`) {
		t.Fatalf("add with a custom scheme: %s", got)
	}
	body := []byte(`{"order":1}`)
	if code := send("/v1/hooks/acme/s", map[string]string{"X-Acme-Signature": webhook.SignGitHub(secret, body)}, body); code != 202 {
		t.Fatalf("signed by the custom scheme: %d", code)
	}
	if code := send("/v1/hooks/acme/s", map[string]string{"X-Acme-Signature": webhook.SignGitHub("another-secret-0123456789", body)}, body); code != 401 {
		t.Fatalf("signed with another secret: %d", code)
	}
	preset := testkit.WriteTemp(t, "apikey.yaml", []byte("{name: api_key, header: X-Hook-Key}\n"))
	got = cli(0, "set-source", "acme", "k", "--verify-file", preset, "--secret-env", "S")
	if !strings.Contains(got, `"scheme": "api_key"`) {
		t.Fatalf("set-source with a preset override: %s", got)
	}
	if a, b := send("/v1/hooks/acme/k", map[string]string{"X-Hook-Key": secret}, body), send("/v1/hooks/acme/k", map[string]string{"X-Api-Key": secret}, body); a != 202 || b != 401 {
		t.Fatalf("api_key under X-Hook-Key: %d, under the preset's header: %d", a, b)
	}
	for file, want := range map[string]string{
		testkit.WriteTemp(t, "bad1.yaml", []byte("{name: acme, type: hmac, algo: sha256}\n")): "algo",
		testkit.WriteTemp(t, "bad2.yaml", []byte("{name: nosuch}\n")):                         "nosuch",
		testkit.WriteTemp(t, "bad3.yaml", []byte("[github]\n")):                               "mapping",
		testkit.WriteTemp(t, "bad4.yaml", nil):                                                "empty",
		"/nonexistent/scheme.yaml":                                                            "no such file",
	} {
		if got := cli(1, "set-source", "acme", "x", "--verify-file", file, "--secret-env", "S"); !strings.Contains(got, want) {
			t.Errorf("--verify-file %s: %s, want it to name %q", file, got, want)
		}
	}
	cli(1, "set-source", "acme", "x", "--verify", "github", "--verify-file", custom, "--secret-env", "S")
	if got := cli(0, "get", "acme"); strings.Contains(got, `"x": {`) {
		t.Fatalf("a refused source was written: %s", got)
	}
}

// TestTenantsAddFailsWhole: a failed `edge tenants add` changes nothing.
// On a node without --secrets-key-file the source's secret is refused
// (400), and neither the tenant nor its source exists afterwards: the
// node's admission is what it was (the quickstart still open to others).
func TestTenantsAddFailsWhole(t *testing.T) {
	n := node.Start(t, testkit.New(t), "--admin-token", adminToken)
	const secret = "add-fails-secret-0123456789"
	env := map[string]string{envAdminURL: n.URL, envAdminToken: adminToken, "GH_SECRET": secret}
	cli := tenantsRunner(t, env, secret, adminToken)
	if got := cli(1, "add", "acme", "--source", "gh", "--verify", "github", "--secret-env", "GH_SECRET"); !strings.Contains(got, "secrets-key-file") {
		t.Fatalf("add without a key file: %s", got)
	}
	if got := cli(0, "list"); strings.Contains(got, "acme") {
		t.Fatalf("the failed add left a tenant:\n%s", got)
	}
	cli(1, "get", "acme")
	if code := post(t, n.URL, "/v1/hooks/other/raw", ""); code != 202 {
		t.Fatalf("another tenant after the failed add: %d, want 202 (nothing changed)", code)
	}
	// A source with a bad name in the same write is refused whole too.
	if got := cli(1, "add", "acme", "--source", "gh", "--dedupe", "bogus:spec"); !strings.Contains(got, "400") {
		t.Fatalf("add with a bad dedupe: %s", got)
	}
	if got := cli(0, "list"); strings.Contains(got, "acme") {
		t.Fatalf("the failed add left a tenant:\n%s", got)
	}
	// A node without --admin-token has no admin API: the CLI says so.
	plain := node.Start(t, n.Kit)
	if got := tenantsRunner(t, map[string]string{envAdminURL: plain.URL, envAdminToken: adminToken})(1, "list"); !strings.Contains(got, "serves no admin API: start the node with --admin-token") {
		t.Fatalf("list against a node without an admin token: %s", got)
	}
	// The same add that succeeds writes both at once.
	if got := cli(0, "add", "acme", "--source", "raw", "--dedupe", "none"); !strings.Contains(got, `"raw"`) || !strings.Contains(got, `"revision": `) {
		t.Fatalf("add: %s", got)
	}
}

// metric returns the line of name in the node's /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	return testkit.ScrapeLine(t, base, name)
}

// TestRemovingTenantsNeverReopens: a quickstart node closes to unknown
// tenants with its first record, and no removal opens it again: not
// removing a verifying source (its name is then 404, not unsigned), not
// removing the last record (every tenant 404, the log and
// sluice_admission_open say so), not after a restart on the same bucket;
// nor does a set-source that leaves verify out.
func TestRemovingTenantsNeverReopens(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	kit := testkit.New(t)
	logs := &testkit.LogBuffer{}
	args := []string{"--admin-token", adminToken,
		"--secrets-key-file", testkit.WriteTemp(t, "keys", []byte("k1 "+base64.StdEncoding.EncodeToString(key)))}
	n := node.StartLogged(t, kit, slog.New(slog.NewTextHandler(logs, nil)), args...)
	const secret = "reopen-secret-0123456789abc"
	env := map[string]string{envAdminURL: n.URL, envAdminToken: adminToken, "GH_SECRET": secret}
	cli := tenantsRunner(t, env, secret, adminToken)
	if code := post(t, n.URL, "/v1/hooks/other/raw", ""); code != 202 {
		t.Fatalf("quickstart before any tenant: %d", code)
	}
	if m := metric(t, n.URL, "sluice_admission_open"); m != "sluice_admission_open 1" {
		t.Fatalf("before any tenant: %q", m)
	}
	cli(0, "add", "acme", "--source", "gh", "--verify", "github", "--secret-env", "GH_SECRET")
	if a, b, c := post(t, n.URL, "/v1/hooks/acme/gh", secret), post(t, n.URL, "/v1/hooks/acme/gh", ""), post(t, n.URL, "/v1/hooks/other/raw", ""); a != 202 || b != 401 || c != 404 {
		t.Fatalf("with acme: signed %d unsigned %d other %d", a, b, c)
	}
	// A set-source that leaves verify out never makes the source unsigned.
	cli(1, "set-source", "acme", "gh", "--dedupe", "none")
	if code := post(t, n.URL, "/v1/hooks/acme/gh", ""); code != 401 {
		t.Fatalf("unsigned after a set-source without verify: %d", code)
	}
	// Removing the verifying source: its name is unknown now, not unsigned.
	cli(0, "set-source", "acme", "raw", "--dedupe", "none")
	cli(0, "rm", "acme", "gh")
	if a, b := post(t, n.URL, "/v1/hooks/acme/gh", ""), post(t, n.URL, "/v1/hooks/acme/raw", ""); a != 404 || b != 202 {
		t.Fatalf("after rm acme gh: acme/gh %d acme/raw %d", a, b)
	}
	// Removing the last record.
	cli(0, "rm", "acme")
	for _, p := range []string{"/v1/hooks/acme/gh", "/v1/hooks/acme/raw", "/v1/hooks/other/raw"} {
		if code := post(t, n.URL, p, ""); code != 404 {
			t.Fatalf("after the last tenant was removed: %s %d, want 404", p, code)
		}
	}
	// The node logs it right after the snapshot without the record is in
	// place, which is what answered the CLI: wait for the line.
	testkit.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(logs.String(), "no tenant records left: admission stays closed")
	}, "a log line saying the node is closed")
	if m := metric(t, n.URL, "sluice_admission_open"); m != "sluice_admission_open 0" {
		t.Fatalf("after the last tenant was removed: %q", m)
	}
	// A node started later on the same bucket is closed from the start.
	m := node.Start(t, kit, args...)
	if code := post(t, m.URL, "/v1/hooks/other/raw", ""); code != 404 {
		t.Fatalf("a node started after the last tenant was removed: %d, want 404", code)
	}
}

// TestReloadAfterAdminTenants: a node started without tenants in its file,
// given a tenant through the admin API, says on SIGHUP why unknown tenants
// stay refused — the records — not that the file listed tenants before
// (it never did).
func TestReloadAfterAdminTenants(t *testing.T) {
	file := testkit.WriteTemp(t, "edge.yaml", []byte("# no tenants\n"))
	e := runEdge(t, t.TempDir(), true, "--config", file, "--admin-token", adminToken, "--log-level", "info")
	t.Cleanup(func() { e.stop(t) })
	base, log := e.url, e.stderr
	if r := testkit.HTTP(t, "PUT", base+"/v1/admin/tenants/acme", []byte(`{}`), map[string]string{"Authorization": "Bearer " + adminToken}); r.Code != 201 {
		t.Fatalf("PUT tenant: %d %s", r.Code, r.Body)
	}
	testkit.Eventually(t, 5*time.Second, func() bool { return post(t, base, "/v1/hooks/nobody/x", "") == 404 }, "the quickstart closed by the record")
	e.hup <- syscall.SIGHUP
	testkit.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(log.String(), "configuration reloaded")
	}, "the reload logged")
	got := log.String()
	if !strings.Contains(got, "tenant records exist or existed (admin API)") || strings.Contains(got, "listed in --config before") || strings.Contains(got, "tenants were listed before") {
		t.Fatalf("the reload does not say the records keep unknown tenants out:\n%s", got)
	}
}
