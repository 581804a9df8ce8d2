package httpapi_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/webhook"
)

// exampleYAML is testdata/edge.yaml with the environment secret inlined and
// the process settings the test harness sets itself removed.
func exampleYAML(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(string(b), "secret_env: ACME_SW_SECRET", `secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`, 1)
	var keep []string
	for _, l := range strings.Split(y, "\n") {
		if strings.HasPrefix(l, "http_addr:") || strings.HasPrefix(l, "data_dir:") || strings.HasPrefix(l, "nats_listen:") || strings.HasPrefix(l, "partitions:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// TestExampleConfigRefusesUnlisted: with the commented example config, an
// unsigned request to an unlisted source of a verified tenant, or to an
// unknown tenant, is 404 unknown_source and stores nothing.
func TestExampleConfigRefusesUnlisted(t *testing.T) {
	t.Parallel()
	a := startApp(t, exampleYAML(t))
	for _, p := range []string{"/v1/hooks/acme/unlisted", "/v1/hooks/globex/unlisted", "/v1/hooks/rotating-1/x"} {
		r := a.post(p, []byte(`{}`), nil)
		mustStatus(t, r, 404)
		if r.body["error"] != "unknown_source" {
			t.Fatalf("%s: body %v", p, r.body)
		}
	}
	// A verified source unsigned is still 401; a listed unsigned source and
	// the sandbox tenant (allow_unknown itself) are accepted.
	mustStatus(t, a.post("/v1/hooks/acme/gh", []byte(`{}`), nil), 401)
	mustStatus(t, a.post("/v1/hooks/acme/raw", []byte(`{}`), map[string]string{"X-Event-Id": "e1"}), 202)
	mustStatus(t, a.post("/v1/hooks/sandbox/anything", []byte(`{}`), nil), 202)
	if n := len(a.stored()); n != 2 {
		t.Fatalf("stored %d hooks, want 2", n)
	}
}

// TestSourceLimitsSeparate: a source with its own limits spends only them;
// its tenant's other sources keep their budget, and the other way round.
func TestSourceLimitsSeparate(t *testing.T) {
	t.Parallel()
	a := startApp(t, `
tenants:
  t:
    limits: {hooks: {rate: 0.001, burst: 2}}
    sources:
      shared: {dedupe: none}
      own: {dedupe: none, limits: {hooks: {rate: 0.001, burst: 3}}}
`)
	for i := 0; i < 3; i++ {
		mustStatus(t, a.post("/v1/hooks/t/own", nil, nil), 202)
	}
	r := a.post("/v1/hooks/t/own", nil, nil)
	mustStatus(t, r, 429)
	if !contains(r.hdr.Get("RateLimit-Policy"), `"hooks";q=3;`) {
		t.Fatalf("own RateLimit-Policy %q", r.hdr.Get("RateLimit-Policy"))
	}
	// own's 3 hooks did not touch the tenant's budget of 2.
	for i := 0; i < 2; i++ {
		r := a.post("/v1/hooks/t/shared", nil, nil)
		mustStatus(t, r, 202)
		if want := `"hooks";r=` + string(rune('1'-i)) + ";"; !contains(r.hdr.Get("RateLimit"), want) {
			t.Fatalf("shared RateLimit %q, want %s", r.hdr.Get("RateLimit"), want)
		}
	}
	mustStatus(t, a.post("/v1/hooks/t/shared", nil, nil), 429)
}

const swSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// swHeaders signs body as message id at ts, with webhook-* or (svix) svix-*
// header names.
func swHeaders(t *testing.T, id string, ts int64, body []byte, svix bool) map[string]string {
	t.Helper()
	sig, err := webhook.SignStandard(swSecret, id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	p := "webhook-"
	if svix {
		p = "svix-"
	}
	return map[string]string{p + "id": id, p + "timestamp": strconv.FormatInt(ts, 10), p + "signature": sig}
}

// TestNonceReleasedWhenNotAdmitted: a verified request refused for another
// reason (here 429) gives its replay nonce back, so its identical resend is
// judged afresh (429 again, then 202 once the budget allows), never 401.
func TestNonceReleasedWhenNotAdmitted(t *testing.T) {
	t.Parallel()
	a := startApp(t, `
tenants:
  t:
    sources:
      sw: {dedupe: standard_webhooks, verify: standard_webhooks, secret: "`+swSecret+`", limits: {hooks: {rate: 0.001, burst: 1}}}
`)
	body := []byte(`{}`)
	ts := time.Now().Unix()
	mustStatus(t, a.post("/v1/hooks/t/sw", body, swHeaders(t, "m1", ts, body, false)), 202)
	h2 := swHeaders(t, "m2", ts, body, false)
	for i := 0; i < 2; i++ {
		mustStatus(t, a.post("/v1/hooks/t/sw", body, h2), 429)
	}
	// The stored message is still protected.
	mustStatus(t, a.post("/v1/hooks/t/sw", body, swHeaders(t, "m1", ts, body, false)), 401)
}

// TestLongNamesFitReplayNamespace: a 128-byte tenant and a 128-byte source
// (the longest valid) still verify and store (their replay namespace used to
// exceed 256 bytes and answer every signed request 401).
func TestLongNamesFitReplayNamespace(t *testing.T) {
	t.Parallel()
	tn, sn := strings.Repeat("t", 128), strings.Repeat("s", 128)
	a := startApp(t, "tenants:\n  "+tn+":\n    sources:\n      "+sn+": {dedupe: standard_webhooks, verify: standard_webhooks, secret: \""+swSecret+"\"}\n")
	body := []byte(`{}`)
	h := swHeaders(t, "m1", time.Now().Unix(), body, false)
	mustStatus(t, a.post("/v1/hooks/"+tn+"/"+sn, body, h), 202)
	mustStatus(t, a.post("/v1/hooks/"+tn+"/"+sn, body, h), 401) // the replay
	if ns := httpapi.ReplayNamespace(tn, sn); len(ns) > 256 || ns == httpapi.ReplayNamespace(tn, sn[1:]) {
		t.Fatalf("namespace %q", ns)
	}
}

// TestVerificationFailuresBounded: a source's failed signature checks are
// budgeted (default burst 100): beyond, 429 without checking, so forgeries
// cost bounded HMAC work; another source is unaffected.
func TestVerificationFailuresBounded(t *testing.T) {
	t.Parallel()
	a := startApp(t, exampleYAML(t))
	body := []byte(`{}`)
	forged := map[string]string{"X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64), "X-GitHub-Delivery": "d"}
	// The budget refills at its rate while the test runs: count the 401s
	// until the first 429 and compare with burst + rate × elapsed.
	lim := httpapi.DefaultVerifyFailures()
	start, n := time.Now(), int64(0)
	var r resp
	for {
		r = a.post("/v1/hooks/acme/gh", body, forged)
		if r.code != 401 {
			break
		}
		if n++; n > 10*lim.Burst {
			t.Fatalf("%d forged requests all checked", n)
		}
	}
	elapsed := time.Since(start).Seconds()
	mustStatus(t, r, 429)
	if r.body["error"] != "rate_limited" || r.hdr.Get("Retry-After") == "" {
		t.Fatalf("429 %v %v", r.body, r.hdr)
	}
	if hi := lim.Burst + int64(lim.Rate*elapsed) + 1; n < lim.Burst || n > hi {
		t.Fatalf("%d failures checked in %.2fs; want %d..%d", n, elapsed, lim.Burst, hi)
	}
	mustStatus(t, a.post("/v1/hooks/acme/sw", body, swHeaders(t, "m1", time.Now().Unix(), body, false)), 202)
}

// TestSvixHeaders: the svix preset verifies and dedupes requests signed
// with svix-* headers (and standard_webhooks ones with webhook-*).
func TestSvixHeaders(t *testing.T) {
	t.Parallel()
	a := startApp(t, exampleYAML(t))
	body := []byte(`{"type":"x"}`)
	ts := time.Now().Unix()
	r := a.post("/v1/hooks/globex/svix", body, swHeaders(t, "msg_9", ts, body, true))
	mustStatus(t, r, 202)
	id := r.body["id"]
	// A genuine retry (re-signed with a new timestamp) is a duplicate of it.
	r = a.post("/v1/hooks/globex/svix", body, swHeaders(t, "msg_9", ts+1, body, true))
	mustStatus(t, r, 200)
	if r.body["id"] != id {
		t.Fatalf("duplicate of %v: %v", id, r.body)
	}
	var key string
	for _, m := range a.stored() {
		key = m.Header.Get(hooks.HeaderDedupeKey)
	}
	if key != "msg_9" {
		t.Fatalf("stored dedupe key %q", key)
	}
}

// TestAdminMetricLabelsFixed: a refused admin request with an arbitrary
// method is counted under a fixed label, not its method.
func TestAdminMetricLabelsFixed(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML, "--admin-token", adminToken)
	for _, m := range []string{"FOO1", "BAR2"} {
		req, _ := http.NewRequest(m, a.url+"/v1/admin/tenants/x/limits", nil)
		mustStatus(t, a.do(req), 401)
	}
	req, _ := http.NewRequest(http.MethodGet, a.url+"/metrics", nil)
	r := a.do(req)
	if contains(r.raw, "FOO1") || contains(r.raw, "BAR2") || !contains(r.raw, `sluice_edge_admin_requests_total{code="401",op="other"} 2`) {
		t.Fatalf("admin metrics:\n%s", grepLines(r.raw, "admin_requests"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestGitHubReplayWithFreshDelivery: GitHub signs no timestamp, so a
// captured body+signature re-sent under a fresh X-GitHub-Delivery is a
// duplicate of the original (not stored again); a genuine redelivery (same
// delivery id) is still 200 duplicate; another body is a new hook.
func TestGitHubReplayWithFreshDelivery(t *testing.T) {
	t.Parallel()
	a := startApp(t, exampleYAML(t))
	const secret = "It's a Secret to Everybody"
	body := []byte(`{"action":"opened","number":1}`)
	sig := webhook.SignGitHub(secret, body)
	first := a.post("/v1/hooks/acme/gh", body, map[string]string{"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": sig})
	mustStatus(t, first, 202)
	for _, delivery := range []string{"d-2", "d-3", "d-1"} {
		r := a.post("/v1/hooks/acme/gh", body, map[string]string{"X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sig})
		mustStatus(t, r, 200)
		if r.body["status"] != "duplicate" || r.body["id"] != first.body["id"] {
			t.Fatalf("delivery %s: %v, want a duplicate of %v", delivery, r.body, first.body["id"])
		}
	}
	other := []byte(`{"action":"closed","number":1}`)
	mustStatus(t, a.post("/v1/hooks/acme/gh", other, map[string]string{"X-GitHub-Delivery": "d-4", "X-Hub-Signature-256": webhook.SignGitHub(secret, other)}), 202)
	st := a.stored()
	if len(st) != 2 {
		t.Fatalf("stored %d hooks, want 2", len(st))
	}
	if k := st[str(first.body["id"])].Header.Get(hooks.HeaderDedupeKey); k != httpapi.ContentKey(body) {
		t.Fatalf("stored dedupe key %q", k)
	}
}
