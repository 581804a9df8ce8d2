package httpapi_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

// defaultsYAML accepts any tenant (allow_unknown) with budgets a test
// does not reach unless it sets its own.
const defaultsYAML = `
allow_unknown: true
defaults:
  limits: {hooks: {rate: 1000, burst: 1000}, bytes: {rate: 10485760, burst: 20971520}}
`

const testYAML = defaultsYAML + `tenants:
  slow:
    limits: {hooks: {rate: 0.001, burst: 2}}
  bytesy:
    limits: {hooks: {rate: 1000, burst: 1000}, bytes: {rate: 0.001, burst: 1000}}
  acme:
    sources:
      gh:  {dedupe: github, verify: github, secret: "It's a Secret to Everybody"}
      pay: {dedupe: stripe, verify: stripe, secret: "whsec_test"}
      sw:  {dedupe: standard_webhooks, verify: standard_webhooks, secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
      raw: {dedupe: "header:X-Event-Id", max_body_bytes: 64}
  strict:
    limits: {hooks: {rate: 0.001, burst: 1}}
    sources:
      gh: {dedupe: github, verify: github, secret: "s3cret"}
`

func TestRateLimitedAfterBurst(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	for i := 0; i < 2; i++ {
		r := a.post("/v1/hooks/slow/src", []byte(`{}`), nil)
		mustStatus(t, r, 202)
		if r.body["status"] != "accepted" || r.body["id"] == "" || r.hdr.Get("X-Hook-Id") != r.body["id"] {
			t.Fatalf("accepted body %v", r.body)
		}
		if !contains(r.hdr.Get("RateLimit-Policy"), `"hooks";q=2;w=2000`) {
			t.Fatalf("RateLimit-Policy = %q", r.hdr.Get("RateLimit-Policy"))
		}
		if want := fmt.Sprintf(`"hooks";r=%d;`, 1-i); !contains(r.hdr.Get("RateLimit"), want) {
			t.Fatalf("RateLimit = %q, want %s", r.hdr.Get("RateLimit"), want)
		}
	}
	r := a.post("/v1/hooks/slow/src", []byte(`{}`), nil)
	mustStatus(t, r, 429)
	if r.body["error"] != "rate_limited" {
		t.Fatalf("body %v", r.body)
	}
	ra, err := strconv.Atoi(r.hdr.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 1000 {
		t.Fatalf("Retry-After = %q", r.hdr.Get("Retry-After"))
	}
	if ms, _ := r.body["retry_after_ms"].(float64); ms < 1 || ms > 1_000_000 {
		t.Fatalf("retry_after_ms = %v", r.body["retry_after_ms"])
	}
	if r.hdr.Get("RateLimit") == "" || r.hdr.Get("RateLimit-Policy") == "" {
		t.Fatalf("429 without RateLimit headers: %v", r.hdr)
	}
	// Another tenant is unaffected.
	mustStatus(t, a.post("/v1/hooks/other/src", []byte(`{}`), nil), 202)
	if n := len(a.stored()); n != 3 {
		t.Fatalf("stored %d hooks, want 3", n)
	}
}

func TestBytesBudgetSeparate(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	body := []byte(strings.Repeat("x", 600))
	mustStatus(t, a.post("/v1/hooks/bytesy/src", body, nil), 202)
	// 600 of 1000 bytes spent: another 600 is over the bytes budget while
	// the hooks budget (1000) is far from spent.
	r := a.post("/v1/hooks/bytesy/src", body, nil)
	mustStatus(t, r, 429)
	// A small body still fits.
	mustStatus(t, a.post("/v1/hooks/bytesy/src", []byte("tiny"), nil), 202)
	// A body above the whole bytes burst can never pass: 413.
	r = a.post("/v1/hooks/bytesy/src", []byte(strings.Repeat("y", 1001)), nil)
	mustStatus(t, r, 413)
}

func TestDuplicateDelivery(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	h := map[string]string{"Idempotency-Key": "evt-1"}
	first := a.post("/v1/hooks/t1/s", []byte(`{"a":1}`), h)
	mustStatus(t, first, 202)
	id := first.body["id"]
	for i := 0; i < 3; i++ {
		r := a.post("/v1/hooks/t1/s", []byte(`{"a":1}`), h)
		mustStatus(t, r, 200)
		if r.body["status"] != "duplicate" || r.body["id"] != id || r.body["duplicate"] != true || r.hdr.Get("X-Hook-Id") != id {
			t.Fatalf("duplicate body %v", r.body)
		}
	}
	// Different ids are stored separately; the same key under another tenant
	// or source is another event.
	mustStatus(t, a.post("/v1/hooks/t1/s", []byte(`{}`), map[string]string{"Idempotency-Key": "evt-2"}), 202)
	mustStatus(t, a.post("/v1/hooks/t2/s", []byte(`{}`), h), 202)
	mustStatus(t, a.post("/v1/hooks/t1/s2", []byte(`{}`), h), 202)
	st := a.stored()
	if len(st) != 4 {
		t.Fatalf("stored %d, want 4", len(st))
	}
	m := st[str(id)]
	if m == nil || m.Header.Get("Sluice-Dedupe-Key") != "evt-1" || m.Header.Get("Sluice-Tenant") != "t1" ||
		m.Header.Get("Sluice-Source") != "s" || m.Header.Get("Nats-Msg-Id") != str(id) || string(m.Data) != `{"a":1}` {
		t.Fatalf("stored hook %+v", m)
	}
	if _, err := time.Parse(time.RFC3339Nano, m.Header.Get("Sluice-Received-At")); err != nil {
		t.Fatalf("Sluice-Received-At: %v", err)
	}
	if m.Subject != "sluice.hooks.t1.s" {
		t.Fatalf("subject %q", m.Subject)
	}
}

func TestDedupeTTLExpires(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML, "--dedupe-ttl", "1s")
	h := map[string]string{"Idempotency-Key": "k"}
	mustStatus(t, a.post("/v1/hooks/t/s", nil, h), 202)
	mustStatus(t, a.post("/v1/hooks/t/s", nil, h), 200)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := a.post("/v1/hooks/t/s", nil, h)
		if r.code == 202 {
			break
		}
		mustStatus(t, r, 200)
		if time.Now().After(deadline) {
			t.Fatal("key not accepted again after its dedupe TTL")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStripeJSONIDAndLongKey(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	body := []byte(`{"id":"evt_123","type":"charge.succeeded"}`)
	now := time.Now().Unix()
	sig := webhook.SignStripe("whsec_test", now, body)
	r := a.post("/v1/hooks/acme/pay", body, map[string]string{"Stripe-Signature": sig})
	mustStatus(t, r, 202)
	// Stripe re-signs a retry with a new timestamp: verification passes,
	// dedupe answers.
	sig2 := webhook.SignStripe("whsec_test", now+1, body)
	r2 := a.post("/v1/hooks/acme/pay", body, map[string]string{"Stripe-Signature": sig2})
	mustStatus(t, r2, 200)
	if r2.body["id"] != r.body["id"] {
		t.Fatalf("duplicate id %v, want %v", r2.body["id"], r.body["id"])
	}
	long := strings.Repeat("k", 300)
	r3 := a.post("/v1/hooks/t/s", nil, map[string]string{"Idempotency-Key": long})
	mustStatus(t, r3, 202)
	m := a.stored()[str(r3.body["id"])]
	if k := m.Header.Get("Sluice-Dedupe-Key"); !strings.HasPrefix(k, "sha256:") || len(k) != 7+64 {
		t.Fatalf("long key stored as %q", k)
	}
	mustStatus(t, a.post("/v1/hooks/t/s", nil, map[string]string{"Idempotency-Key": long}), 200)
}

func TestForgedRequestsSpendNothing(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	body := []byte(`{"zen":"ok"}`)
	for i := 0; i < 2; i++ {
		r := a.post("/v1/hooks/strict/gh", body, map[string]string{
			"X-Hub-Signature-256": "sha256=" + strings.Repeat("0", 64),
			"X-GitHub-Delivery":   "d-1",
		})
		mustStatus(t, r, 401)
		if r.body["error"] != "verification_failed" {
			t.Fatalf("body %v", r.body)
		}
	}
	// The budget (burst 1) is intact and the key unclaimed.
	r := a.post("/v1/hooks/strict/gh", body, map[string]string{
		"X-Hub-Signature-256": webhook.SignGitHub("s3cret", body),
		"X-GitHub-Delivery":   "d-1",
	})
	mustStatus(t, r, 202)
}

// signedSW returns the headers of a Standard Webhooks request to testYAML's
// acme/sw source: message id, timestamp ts, body signed.
func signedSW(t *testing.T, id string, ts int64, body []byte) map[string]string {
	t.Helper()
	sig, err := webhook.SignStandard("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", id, ts, body)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"webhook-id": id, "webhook-timestamp": strconv.FormatInt(ts, 10), "webhook-signature": sig}
}

func TestStandardWebhooksReplay(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	body := []byte(`{"type":"x"}`)
	ts := time.Now().Unix()
	h := signedSW(t, "msg_1", ts, body)
	mustStatus(t, a.post("/v1/hooks/acme/sw", body, h), 202)
	// The captured request sent again: a replay.
	r := a.post("/v1/hooks/acme/sw", body, h)
	mustStatus(t, r, 401)
	// A genuine retry is re-signed with a new timestamp: dedupe answers.
	mustStatus(t, a.post("/v1/hooks/acme/sw", body, signedSW(t, "msg_1", ts+1, body)), 200)
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	cases := []struct {
		path string
		body string
		code int
		err  string
	}{
		{"/v1/hooks/" + strings.Repeat("a", 129) + "/s", "", 400, "invalid_tenant"},
		{"/v1/hooks/a%2Ab/s", "", 400, "invalid_tenant"},
		{"/v1/hooks/t/s%20x", "", 400, "invalid_source"},
		{"/v1/hooks/acme/raw", strings.Repeat("z", 65), 413, "payload_too_large"},
	}
	for i, c := range cases {
		r := a.post(c.path, []byte(c.body), nil)
		if r.code != c.code || r.body["error"] != c.err {
			t.Fatalf("%d %s: %d %v", i, c.path, r.code, r.body)
		}
	}
	r := a.post("/v1/hooks/acme/raw", []byte(strings.Repeat("z", 65)), nil)
	if r.body["limit"] != float64(64) {
		t.Fatalf("413 body %v", r.body)
	}
	req, _ := http.NewRequest(http.MethodGet, a.url+"/v1/hooks/t/s", nil)
	if r := a.do(req); r.code != 405 {
		t.Fatalf("GET hooks: %d", r.code)
	}
}

func TestUnknownSourceWhenNotAllowed(t *testing.T) {
	t.Parallel()
	a := startApp(t, `
allow_unknown: false
tenants:
  acme:
    sources:
      raw: {dedupe: none}
`)
	mustStatus(t, a.post("/v1/hooks/acme/raw", nil, nil), 202)
	r := a.post("/v1/hooks/acme/other", nil, nil)
	mustStatus(t, r, 404)
	if r.body["error"] != "unknown_source" {
		t.Fatalf("body %v", r.body)
	}
	mustStatus(t, a.post("/v1/hooks/nobody/raw", nil, nil), 404)
}
