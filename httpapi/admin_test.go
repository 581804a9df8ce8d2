package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/hooks"
)

func (a *app) admin(method, path, token, body string) resp {
	a.t.Helper()
	req, err := http.NewRequest(method, a.url+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return a.do(req)
}

func TestAdminLimits(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML, "--admin-token", adminToken)
	// Without or with a wrong token: 401.
	mustStatus(t, a.admin("GET", "/v1/admin/tenants/slow/limits", "", ""), 401)
	mustStatus(t, a.admin("GET", "/v1/admin/tenants/slow/limits", "nope", ""), 401)

	r := a.admin("GET", "/v1/admin/tenants/slow/limits", adminToken, "")
	mustStatus(t, r, 200)
	if r.body["origin"] != "tenant" {
		t.Fatalf("origin %v", r.body)
	}
	if r := a.admin("GET", "/v1/admin/tenants/nobody/limits", adminToken, ""); r.body["origin"] != "default" {
		t.Fatalf("origin %v", r.body)
	}
	// Spend the tenant's burst of 2.
	mustStatus(t, a.post("/v1/hooks/slow/s", nil, nil), 202)
	mustStatus(t, a.post("/v1/hooks/slow/s", nil, nil), 202)
	mustStatus(t, a.post("/v1/hooks/slow/s", nil, nil), 429)

	// An override resets the tenant's buckets and applies at once.
	r = a.admin("PUT", "/v1/admin/tenants/slow/limits", adminToken, `{"hooks":{"rate":0.001,"burst":3}}`)
	mustStatus(t, r, 200)
	if r.body["origin"] != "override" {
		t.Fatalf("PUT reply %v", r.body)
	}
	for i := 0; i < 3; i++ {
		mustStatus(t, a.post("/v1/hooks/slow/s", nil, nil), 202)
	}
	mustStatus(t, a.post("/v1/hooks/slow/s", nil, nil), 429)
	if r := a.admin("GET", "/v1/admin/tenants/slow/limits", adminToken, ""); r.body["origin"] != "override" {
		t.Fatalf("after PUT: %v", r.body)
	}
	// Bad bodies.
	for _, b := range []string{`{`, `{}`, `{"hooks":{"rate":0,"burst":1}}`, `{"hooks":{"rate":1,"burst":0}}`, `{"x":1}`} {
		mustStatus(t, a.admin("PUT", "/v1/admin/tenants/slow/limits", adminToken, b), 400)
	}
	// A bad rate is refused by the one rate rule (limits.Rate.Validate),
	// with its reason: also a positive rate too slow for any limit.
	for _, c := range []struct{ body, reason string }{
		{`{"hooks":{"rate":0,"burst":1}}`, "hooks: rate must be a finite number > 0, got 0"},
		{`{"hooks":{"rate":1,"burst":0}}`, "hooks: burst must be >= 1, got 0"},
		{`{"bytes":{"rate":1e-300,"burst":1}}`, "bytes: rate 1e-300 with burst 1: gcra: invalid limit: rate 1e-300/s is too slow for int64 microseconds"},
	} {
		r := a.admin("PUT", "/v1/admin/tenants/slow/limits", adminToken, c.body)
		mustStatus(t, r, 400)
		if r.body["error"] != "invalid_request" || r.body["reason"] != c.reason {
			t.Fatalf("PUT %s: %v", c.body, r.body)
		}
	}
	mustStatus(t, a.admin("DELETE", "/v1/admin/tenants/slow/limits", adminToken, ""), 200)
	mustStatus(t, a.admin("DELETE", "/v1/admin/tenants/slow/limits", adminToken, ""), 404)
	if r := a.admin("GET", "/v1/admin/tenants/slow/limits", adminToken, ""); r.body["origin"] != "tenant" {
		t.Fatalf("after DELETE: %v", r.body)
	}
}

func TestAdminOverrideSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startAppIn(t, dir, testYAML, "--admin-token", adminToken)
	mustStatus(t, a.admin("PUT", "/v1/admin/tenants/x/limits", adminToken, `{"hooks":{"rate":5,"burst":7}}`), 200)
	a.fx.RequireStop()
	b := startAppIn(t, dir, testYAML, "--admin-token", adminToken)
	r := b.admin("GET", "/v1/admin/tenants/x/limits", adminToken, "")
	if r.body["origin"] != "override" {
		t.Fatalf("override lost across restart: %v", r.body)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	mustStatus(t, a.admin("GET", "/v1/admin/tenants/slow/limits", "anything", ""), 404)
}

func TestAdminClaimLookup(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML, "--admin-token", adminToken)
	r := a.admin("GET", "/v1/admin/claims/t/s/k1", adminToken, "")
	mustStatus(t, r, 200)
	if r.body["state"] != "absent" {
		t.Fatalf("absent claim: %v", r.body)
	}
	p := a.post("/v1/hooks/t/s", nil, map[string]string{"Idempotency-Key": "k1"})
	mustStatus(t, p, 202)
	r = a.admin("GET", "/v1/admin/claims/t/s/k1", adminToken, "")
	if r.body["state"] != "committed" || r.body["hook_id"] != p.body["id"] {
		t.Fatalf("committed claim: %v", r.body)
	}
	if ms, _ := r.body["expires_in_ms"].(float64); ms < float64((71 * time.Hour).Milliseconds()) {
		t.Fatalf("expires_in_ms %v", r.body["expires_in_ms"])
	}
}

// When JetStream cannot store the hook the answer is 503, the claim is
// released, and the sender's retry is accepted once the store is back.
func TestStoreUnavailableReleasesClaim(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.nats.JS.DeleteStream(ctx, "HOOKS"); err != nil {
		t.Fatal(err)
	}
	h := map[string]string{"Idempotency-Key": "k-503"}
	r := a.post("/v1/hooks/t/s", []byte(`{}`), h)
	mustStatus(t, r, 503)
	if r.body["error"] != "store_unavailable" || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("503: %v %v", r.body, r.hdr)
	}
	if _, err := hooks.EnsureStream(ctx, a.nats.JS, hooks.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	r = a.post("/v1/hooks/t/s", []byte(`{}`), h)
	mustStatus(t, r, 202)
	if len(a.stored()) != 1 {
		t.Fatal("retry not stored")
	}
}

func TestOperatorEndpoints(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		req, _ := http.NewRequest("GET", a.url+p, nil)
		r := a.do(req)
		mustStatus(t, r, 200)
		if p == "/metrics" && !strings.Contains(r.raw, "sluice_edge_requests_total") && !strings.Contains(r.raw, "sluice_quota") {
			t.Fatalf("metrics missing sluice series:\n%.500s", r.raw)
		}
	}
	mustStatus(t, a.post("/v1/hooks/t/s", nil, nil), 202)
	req, _ := http.NewRequest("GET", a.url+"/metrics", nil)
	if r := a.do(req); !strings.Contains(r.raw, `sluice_edge_requests_total{code="202",outcome="accepted"} 1`) {
		t.Fatalf("request metric missing")
	}
}

const adminToken = "admin-token-0123456789abcdef"

// TestReceipts: an operator asks whether a provider's event id arrived:
// by dedupe key (the claim and the stored message) and by hook id; an
// absent one is 404.
func TestReceipts(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
gh: {dedupe: github, event_type: github}
other: {dedupe: github}
`, "--admin-token", adminToken)
	for _, d := range []string{"d-0", "d-1"} {
		mustStatus(t, a.post("/v1/hooks/acme/other", []byte(`{}`), map[string]string{"X-GitHub-Delivery": d}), 202)
	}
	first := a.post("/v1/hooks/acme/gh", []byte(`{"n":1}`), map[string]string{"X-GitHub-Delivery": "del 1 ü", "X-GitHub-Event": "push"})
	slash := a.post("/v1/hooks/acme/gh", []byte(`{"n":3}`), map[string]string{"X-GitHub-Delivery": "a/b"})
	mustStatus(t, slash, 202)
	mustStatus(t, first, 202)
	mustStatus(t, a.post("/v1/hooks/acme/gh", []byte(`{"n":2}`), map[string]string{"X-GitHub-Delivery": "d-2"}), 202)
	id := str(first.body["id"])

	r := a.admin("GET", "/v1/admin/hooks/acme/gh/"+url.PathEscape("del 1 ü"), adminToken, "")
	mustStatus(t, r, 200)
	st := a.stored()[id]
	if r.body["state"] != "committed" || r.body["hook_id"] != id || r.body["stored"] != true ||
		r.body["subject"] != "sluice.hooks.acme.gh.push" || r.body["stream_seq"] != float64(st.Sequence) ||
		r.body["received_at"] == nil {
		t.Fatalf("receipt: %s (stored seq %d)", r.raw, st.Sequence)
	}
	r = a.admin("GET", "/v1/admin/hooks/acme/gh?hook_id="+id, adminToken, "")
	mustStatus(t, r, 200)
	if r.body["stream_seq"] != float64(st.Sequence) || r.body["subject"] != "sluice.hooks.acme.gh.push" {
		t.Fatalf("by hook id: %s", r.raw)
	}
	r = a.admin("GET", "/v1/admin/hooks/acme/gh?key="+url.QueryEscape("a/b"), adminToken, "")
	mustStatus(t, r, 200)
	if r.body["hook_id"] != slash.body["id"] || r.body["subject"] != "sluice.hooks.acme.gh.=" {
		t.Fatalf("by ?key=: %s", r.raw)
	}
	for _, c := range []struct {
		path string
		code int
	}{
		{"/v1/admin/hooks/acme/gh/never-sent", 404},
		{"/v1/admin/hooks/acme/gh?hook_id=nope", 404},
		{"/v1/admin/hooks/acme/other/del%201%20%C3%BC", 404}, // another source's key
		{"/v1/admin/hooks/acme/gh/x?key=y", 400},
		{"/v1/admin/hooks/acme/gh", 400},
		{"/v1/admin/hooks/acme/gh/x?hook_id=" + id, 400},
		{"/v1/admin/hooks/a%20b/gh/x", 400},
	} {
		if r := a.admin("GET", c.path, adminToken, ""); r.code != c.code {
			t.Errorf("%s: %d %s, want %d", c.path, r.code, r.raw, c.code)
		}
	}
	if r := a.admin("GET", "/v1/admin/hooks/acme/gh?hook_id="+id, "wrong-token-0123456789", ""); r.code != 401 {
		t.Fatalf("without the token: %d", r.code)
	}
}
