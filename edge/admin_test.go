package edge_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/edge"
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
	if _, err := edge.EnsureStream(ctx, a.nats.JS, edge.StreamConfig{}); err != nil {
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
