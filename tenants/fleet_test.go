package tenants_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/node"
	"github.com/sluice-dev/sluice/webhook"
)

const adminToken = "fleet-admin-token-0123456789abcdef"

var seq atomic.Int64

// postHook posts a GitHub-signed hook (secret "": unsigned) with a fresh
// body and returns the status.
func postHook(t *testing.T, base, tenant, source, secret string) int {
	t.Helper()
	body := fmt.Sprintf(`{"n":%d}`, seq.Add(1))
	req, err := http.NewRequest("POST", base+"/v1/hooks/"+tenant+"/"+source, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderGitHubDelivery, fmt.Sprintf("d-%d", seq.Load()))
	if secret != "" {
		req.Header.Set(webhook.HeaderGitHubSignature, webhook.SignGitHub(secret, []byte(body)))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// write sends an admin write that must answer want and returns the
// tenants-bucket revision it made (its ETag).
func write(t *testing.T, base, method, path, body string, want int, hdr ...string) uint64 {
	t.Helper()
	code, reply, h := do(t, base, method, path, body, hdr...)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, reply, want)
	}
	rev, err := strconv.ParseUint(strings.Trim(h.Get("ETag"), `"`), 10, 64)
	if err != nil || rev == 0 {
		t.Fatalf("%s %s: ETag %q", method, path, h.Get("ETag"))
	}
	return rev
}

// caughtUp waits until the node at base applied the tenants bucket up to
// rev (sluice_tenants_revision, read from the snapshot it serves) and
// returns how long that took. From then on the node serves that revision:
// what it answers is checked once, never retried.
func caughtUp(t *testing.T, base string, rev uint64) time.Duration {
	t.Helper()
	start := time.Now()
	testkit.Eventually(t, 30*time.Second, func() bool {
		n, err := strconv.ParseUint(metric(t, base, "sluice_tenants_revision"), 10, 64)
		return err == nil && n >= rev
	}, fmt.Sprintf("%s applied tenants revision %d", base, rev))
	return time.Since(start)
}

// TestFleetOnboardRotateRemove: on a three-node cluster, a tenant added
// through the admin API of node 1 accepts signed hooks on node 3 within a
// second; a rotation on node 2 reaches node 3; a deleted source answers
// 404 on every node; no secret reaches a log.
func TestFleetOnboardRotateRemove(t *testing.T) {
	c := testkit.Cluster(t, 3)
	keyFile := testkit.WriteTemp(t, "keys", []byte("k1 "+newKey(t)+"\n"))
	var nodes []*node.Node
	var logs []*testkit.LogBuffer
	for i := range 3 {
		nc := c.Connect(t, i)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		buf := &testkit.LogBuffer{}
		logs = append(logs, buf)
		log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		nodes = append(nodes, node.StartLogged(t, &testkit.Kit{Server: c.Server(i), Conn: nc, JS: js}, log,
			"--admin-token", adminToken, "--secrets-key-file", keyFile))
	}
	n1, n2, n3 := nodes[0].URL, nodes[1].URL, nodes[2].URL
	auth := []string{"Authorization", "Bearer " + adminToken}

	if code, _, _ := do(t, n1, "PUT", "/v1/admin/tenants/acme", `{}`); code != 401 {
		t.Fatalf("admin without the token: %d", code)
	}
	mustDo(t, n1, "PUT", "/v1/admin/tenants/acme", `{"limits":{"hooks":{"rate":1000,"burst":1000}}}`, 201, auth...)
	rev := write(t, n1, "PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"github","dedupe":"github","secret":"`+oldSecret+`"}`, 200, auth...)
	t.Logf("node 3 applied the new tenant after %s (docs/TENANTS.md: within a second)", caughtUp(t, n3, rev))
	if code := postHook(t, n3, "acme", "gh", oldSecret); code != 202 {
		t.Fatalf("signed on node 3 once it applied the source: %d", code)
	}
	if code := postHook(t, n3, "acme", "gh", ""); code != 401 {
		t.Fatalf("unsigned on node 3: %d", code)
	}
	// The quickstart's openness ends once tenants are listed as records.
	for _, n := range nodes {
		caughtUp(t, n.URL, rev)
		if code := postHook(t, n.URL, "globex", "x", ""); code != 404 {
			t.Fatalf("unknown tenant on %s: %d", n.URL, code)
		}
	}

	// A node without the key fails closed: 503, never unverified.
	nc := c.Connect(t, 2)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	keyless := node.Start(t, &testkit.Kit{Server: c.Server(2), Conn: nc, JS: js})
	for _, secret := range []string{oldSecret, ""} {
		if code := postHook(t, keyless.URL, "acme", "gh", secret); code != 503 {
			t.Fatalf("node without the key, secret %q: %d, want 503", secret, code)
		}
	}
	if got := metric(t, keyless.URL, "sluice_tenants_unavailable_sources"); got != "1" {
		t.Fatalf("keyless node's unavailable sources: %s", got)
	}

	// Rotation on node 2, old secret retired at once: node 3 follows.
	rev = write(t, n2, "POST", "/v1/admin/tenants/acme/sources/gh/secrets", `{"secret":"`+newSecret+`","retire_others_after":"0s"}`, 200, auth...)
	t.Logf("node 3 applied the rotation after %s", caughtUp(t, n3, rev))
	if old, next := postHook(t, n3, "acme", "gh", oldSecret), postHook(t, n3, "acme", "gh", newSecret); old != 401 || next != 202 {
		t.Fatalf("node 3 after the rotation: retired secret %d (want 401), new secret %d (want 202)", old, next)
	}

	// Every node reaches the bucket revision of the last write.
	for _, n := range nodes {
		caughtUp(t, n.URL, rev)
	}
	if got := metric(t, n3, "sluice_tenants_records"); got != "1" {
		t.Fatalf("records on node 3: %s", got)
	}

	// A deleted source: 404 on every node.
	rev = write(t, n1, "DELETE", "/v1/admin/tenants/acme/sources/gh", "", 200, auth...)
	for _, n := range nodes {
		caughtUp(t, n.URL, rev)
		if code := postHook(t, n.URL, "acme", "gh", newSecret); code != 404 {
			t.Fatalf("deleted source on %s once it applied the delete: %d, want 404", n.URL, code)
		}
	}
	mustDo(t, n3, "DELETE", "/v1/admin/tenants/acme", "", 200, auth...)
	mustDo(t, n1, "GET", "/v1/admin/tenants/acme", "", 404, auth...)

	for i, l := range logs {
		if s := l.String(); strings.Contains(s, oldSecret) || strings.Contains(s, newSecret) {
			t.Fatalf("node %d logged a secret:\n%s", i+1, s)
		}
	}
}

// metric returns the value of an unlabelled metric on a node's /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	v, ok := strings.CutPrefix(testkit.ScrapeLine(t, base, name), name+" ")
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return v
}
