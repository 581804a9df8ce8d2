package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/webhook"
)

// docBlock returns the first ```sh block after heading in a docs file.
func docBlock(t *testing.T, file, heading string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s: no heading %q", file, heading)
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatalf("%s: no sh block after %q", file, heading)
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```")
	if end < 0 {
		t.Fatalf("%s: unterminated block after %q", file, heading)
	}
	return s[:end+1]
}

// TestLeafModeDocBlock runs docs/LEAF-MODE.md's "One hub and two leaves on
// one machine" as a user pastes it — only its ports and /tmp directories
// are replaced by free ones, its `go build` is done by the test, and the
// nats CLI is a no-op when absent — and checks what the comments promise:
// 202 from e1, e1 linked and decided by the hub, k1 a duplicate at e2.
func TestLeafModeDocBlock(t *testing.T) {
	block := docBlock(t, "docs/LEAF-MODE.md", "## One hub and two leaves on one machine")
	const build = "go build -o edge ./cmd/edge"
	if !strings.Contains(block, build) {
		t.Fatalf("the block no longer builds the binary with %q:\n%s", build, block)
	}
	dir := t.TempDir()
	if err := os.Rename(buildEdge(t), filepath.Join(dir, "edge")); err != nil {
		t.Fatal(err)
	}
	script := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(build)+`.*$`).ReplaceAllString(block, ": built by the test")
	for _, port := range []string{"8080", "8081", "8082", "4222", "7422"} {
		script = regexp.MustCompile(`\b`+port+`\b`).ReplaceAllString(script, fmt.Sprint(testkit.FreePort(t)))
	}
	script = strings.ReplaceAll(script, "/tmp/", dir+"/")
	prelude := "set -u\ncommand -v nats >/dev/null || nats() { echo \"(nats CLI not installed: skipped nats $*)\"; }\n"
	script = prelude + script + "\nkill $(jobs -p)\nwait\n"

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // nothing of the block outlives the test
	if err != nil {
		t.Fatalf("the block failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	got := out.String()
	for _, want := range []string{"HTTP/1.1 202", `"hub_linked":true`, `"quota":"hub"`, `"duplicate":true`} {
		if !strings.Contains(got, want) {
			t.Errorf("the block's output lacks %s\nstdout:\n%s\nstderr:\n%s", want, got, stderr.String())
		}
	}
}

// TestFlagsTableComplete: every flag of the edge is in README.md's
// Configuration table (--trusted-proxies and --client-ip-header were not).
func TestFlagsTableComplete(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var rows strings.Builder
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "| `--") {
			rows.WriteString(l + "\n")
		}
	}
	for _, name := range config.Flags() {
		if !regexp.MustCompile("`--" + regexp.QuoteMeta(name) + "[`,/ =]").MatchString(rows.String()) {
			t.Errorf("--%s is not in README.md's flags table", name)
		}
	}
}

// TestTenantsDocBlock runs docs/TENANTS.md's "Onboarding a tenant" and
// then its "Rotating a secret" as a user pastes them, in order and with
// `set -eu` — against a node of the test
// (its URL and admin token for the block's, its files under a temporary
// directory for /etc/sluice) — so that every variable a command reads is
// exported before it and every example secret is one the node accepts: a
// custom HMAC scheme's at least webhook.DefaultMinSecretBytes, which the
// page must say.
func TestTenantsDocBlock(t *testing.T) {
	const file, heading = "docs/TENANTS.md", "## Onboarding a tenant"
	// Then "Rotating a secret", on the tenant the onboarding made.
	block := docBlock(t, file, heading) + docBlock(t, file, "## Rotating a secret")
	page, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	if rule := fmt.Sprintf("at least %d bytes", webhook.DefaultMinSecretBytes); !strings.Contains(string(page), rule) {
		t.Errorf("%s does not say a custom scheme's secret needs %s", file, rule)
	}
	n := startAdminNode(t)
	dir := t.TempDir()
	if err := os.Rename(buildEdge(t), filepath.Join(dir, "edge")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "payload.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(block, "/etc/sluice", filepath.Join(dir, "etc-sluice"))
	for _, u := range []string{"https://edge-1.internal:8080", "https://edge-3.internal:8080"} {
		if !strings.Contains(script, u) {
			t.Fatalf("the block no longer names %s:\n%s", u, block)
		}
		script = strings.ReplaceAll(script, u, n.URL)
	}
	const tok = "SLUICE_ADMIN_TOKEN=…"
	if !strings.Contains(script, tok) {
		t.Fatalf("the block no longer sets %s:\n%s", tok, block)
	}
	script = strings.ReplaceAll(script, tok, "SLUICE_ADMIN_TOKEN="+adminToken)
	script = "set -eu\nPATH=" + dir + ":$PATH\n" + script

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the block failed: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	for _, want := range []string{`"gh"`, `"pay"`, `"orders"`, "HTTP/1.1 401"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the block's output lacks %s\nstdout:\n%s\nstderr:\n%s", want, out.String(), stderr.String())
		}
	}
}

// TestClientFromAnotherModule runs docs/CLIENTS.md's "Depending on the Go
// client from another module" as a user pastes it at the root of a clone
// (only /tmp/ is replaced): a module of its own, the replace directive, a
// program importing client/ built.
func TestClientFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module of its own (-short)")
	}
	block := docBlock(t, "docs/CLIENTS.md", "## Depending on the Go client from another module")
	dir := t.TempDir()
	script := "set -eu\n" + strings.ReplaceAll(block, "/tmp/", dir+"/")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the block failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "built") {
		t.Fatalf("the block built nothing:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "myservice", "myservice")); err != nil {
		t.Fatalf("no binary: %v\n%s", err, out)
	}
}
