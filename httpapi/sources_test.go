package httpapi_test

// A source's own configuration through the whole app: its access policy,
// event types, handshakes and signature schemes.

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/protocol"
)

// TestSourceAccessPolicy: a source's methods, content types and IP
// allowlist are refused with 405, 415 and 403 before any charge: a
// budget of one hook is still whole after the refusals.
func TestSourceAccessPolicy(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
put:   {methods: [PUT], content_types: [application/json, "text/*"], dedupe: none, limits: {hooks: {rate: 0.001, burst: 1}}}
local: {ip_allow: ["127.0.0.0/8"], dedupe: none}
far:   {ip_allow: ["203.0.113.0/24", "2001:db8::/32"], dedupe: none, limits: {hooks: {rate: 0.001, burst: 1}}}
plain: {dedupe: none}
`)
	send := func(method, path, ct string, hdr map[string]string) resp {
		t.Helper()
		req, err := http.NewRequest(method, a.url+path, bytes.NewReader([]byte(`{}`)))
		if err != nil {
			t.Fatal(err)
		}
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return a.do(req)
	}
	r := send("POST", "/v1/hooks/acme/put", "application/json", nil)
	mustStatus(t, r, 405)
	if r.hdr.Get("Allow") != "PUT" || r.body["error"] != "method_not_allowed" {
		t.Fatalf("405: %v %s", r.hdr, r.raw)
	}
	for _, ct := range []string{"application/xml", "", "garbage/", "application/jsonx"} {
		if r := send("PUT", "/v1/hooks/acme/put", ct, nil); r.code != 415 || r.body["error"] != "unsupported_media_type" {
			t.Fatalf("content type %q: %d %s", ct, r.code, r.raw)
		}
	}
	mustStatus(t, send("PUT", "/v1/hooks/acme/put", "Application/JSON; charset=utf-8", nil), 202) // the one hook of the budget
	mustStatus(t, send("PUT", "/v1/hooks/acme/put", "text/plain", nil), 429)
	mustStatus(t, send("PATCH", "/v1/hooks/acme/plain", "", nil), 405)
	mustStatus(t, send("GET", "/v1/hooks/acme/plain", "", nil), 405)
	mustStatus(t, send("POST", "/v1/hooks/acme/plain", "", nil), 202)

	mustStatus(t, send("POST", "/v1/hooks/acme/local", "", nil), 202)
	// Without trusted proxies a forwarded-for header is the client's own
	// claim and is ignored.
	r = send("POST", "/v1/hooks/acme/far", "", map[string]string{"X-Forwarded-For": "203.0.113.7"})
	mustStatus(t, r, 403)
	if r.body["error"] != "forbidden" {
		t.Fatal(r.raw)
	}
}

// TestAccessCheckOrder: when several of a source's checks fail, ip_allow
// wins (403, with no Allow header: an address outside the list learns
// nothing of the source's methods or content types), then methods (405),
// then content_types (415). A method no source accepts is 405 on the
// route itself, the same for every source.
func TestAccessCheckOrder(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
erp: {methods: [PUT], content_types: [application/json], ip_allow: ["203.0.113.0/24"], dedupe: none}
`, "--trusted-proxies", "127.0.0.1")
	send := func(method, ct, client string) resp {
		t.Helper()
		req, err := http.NewRequest(method, a.url+"/v1/hooks/acme/erp", bytes.NewReader([]byte(`{}`)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		req.Header.Set("X-Forwarded-For", client)
		return a.do(req)
	}
	const outside, inside = "198.51.100.1", "203.0.113.7"
	for _, c := range []struct {
		method, ct, client string
		code               int
		allow              string
	}{
		{"POST", "application/xml", outside, 403, ""}, // all three fail: the address wins
		{"POST", "application/json", outside, 403, ""},
		{"PUT", "application/xml", outside, 403, ""},
		{"POST", "application/xml", inside, 405, "PUT"}, // then the method
		{"PUT", "application/xml", inside, 415, ""},     // then the content type
		{"PUT", "application/json", inside, 202, ""},
		{"DELETE", "application/json", outside, 405, "POST"}, // no source takes DELETE
	} {
		r := send(c.method, c.ct, c.client)
		if r.code != c.code || r.hdr.Get("Allow") != c.allow {
			t.Errorf("%s %s from %s: %d Allow %q, want %d Allow %q (%s)", c.method, c.ct, c.client, r.code, r.hdr.Get("Allow"), c.code, c.allow, r.raw)
		}
	}
}

// TestTrustedProxyClientIP: behind a trusted proxy (here the loopback
// peer), the client is the rightmost address of the header that is not a
// trusted proxy; addresses left of it cannot widen access.
func TestTrustedProxyClientIP(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
far: {ip_allow: ["203.0.113.0/24"], dedupe: none}
`, "--trusted-proxies", "127.0.0.1, 10.0.0.0/8", "--client-ip-header", "X-Real-Client")
	post := func(xff string) int {
		t.Helper()
		hdr := map[string]string{}
		if xff != "" {
			hdr["X-Real-Client"] = xff
		}
		return a.post("/v1/hooks/acme/far", []byte(`{}`), hdr).code
	}
	for xff, want := range map[string]int{
		"203.0.113.7":                      202,
		"198.51.100.1, 203.0.113.7":        202, // the forged left part is not the client
		"203.0.113.7, 10.1.2.3":            202, // an inner trusted proxy is skipped
		"203.0.113.7, 198.51.100.1":        403, // the real client is the rightmost untrusted
		"203.0.113.7, not-an-ip, 10.1.2.3": 403, // malformed: refused, never guessed
		"":                                 403, // the proxy itself (127.0.0.1) is not allowed
		"::ffff:203.0.113.9":               202, // mapped IPv4 is IPv4
	} {
		if got := post(xff); got != want {
			t.Errorf("X-Real-Client %q: %d, want %d", xff, got, want)
		}
	}
}

// TestEventTypeSubjects: a source with event_type stores each hook under
// "<prefix>.hooks.<tenant>.<source>.<type>" (type encoded as one token,
// "=" when the request has none), so a plain NATS filter selects by type;
// a source without event_type keeps the three-token subject.
func TestEventTypeSubjects(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
gh:  {event_type: github, dedupe: none}
pay: {event_type: "json:data.kind", dedupe: none}
raw: {dedupe: none}
`)
	post := func(path, body string, hdr map[string]string) string {
		t.Helper()
		r := a.post(path, []byte(body), hdr)
		mustStatus(t, r, 202)
		return str(r.body["id"])
	}
	push := post("/v1/hooks/acme/gh", `{}`, map[string]string{"X-GitHub-Event": "push"})
	pr := post("/v1/hooks/acme/gh", `{}`, map[string]string{"X-GitHub-Event": "pull_request"})
	none := post("/v1/hooks/acme/gh", `{}`, nil)
	evil := post("/v1/hooks/acme/gh", `{}`, map[string]string{"X-GitHub-Event": "a.b.>*"})
	paid := post("/v1/hooks/acme/pay", `{"data":{"kind":"invoice.paid"}}`, nil)
	raw := post("/v1/hooks/acme/raw", `{}`, map[string]string{"X-GitHub-Event": "push"})

	st := a.stored()
	for id, want := range map[string]string{
		push: "sluice.hooks.acme.gh.push",
		pr:   "sluice.hooks.acme.gh.pull_request",
		none: "sluice.hooks.acme.gh." + protocol.NoTypeToken,
		evil: "sluice.hooks.acme.gh.a=2Eb=2E=3E=2A",
		paid: "sluice.hooks.acme.pay.invoice=2Epaid",
		raw:  "sluice.hooks.acme.raw",
	} {
		if m := st[id]; m == nil || m.Subject != want {
			t.Errorf("hook %s: subject %v, want %s", id, m, want)
		}
	}
	if got := st[paid].Header.Get(hooks.HeaderEventType); got != "invoice.paid" {
		t.Errorf("Sluice-Event-Type %q", got)
	}
	if got := st[none].Header.Get(hooks.HeaderEventType); got != "" {
		t.Errorf("Sluice-Event-Type %q on a hook without a type", got)
	}

	// A consumer of only the pushes sees exactly one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := a.nats.JS.CreateOrUpdateConsumer(ctx, "HOOKS", jetstream.ConsumerConfig{
		FilterSubject: protocol.TypedHookSubject("sluice", "acme", "gh", "push"),
		AckPolicy:     jetstream.AckNonePolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := cons.CachedInfo().NumPending; n != 1 { // as the server created it
		t.Fatalf("push consumer has %d pending, want 1", n)
	}
}

// TestHandshakes: a Slack source answers a signed url_verification with
// its challenge, a CRC source answers GET ?crc_token with the HMAC, and
// neither stores a hook; the CRC answer cannot be used to sign a body.
func TestHandshakes(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
slack: {verify: slack, secret: "`+schemeSecret+`", handshake: slack, dedupe: none}
tw:
  secret: "`+schemeSecret+`"
  handshake: crc
  dedupe: none
  verify: {type: hmac, algorithm: hmac-sha256, header: X-Twitter-Webhooks-Signature, format: single, prefix: "sha256=", encoding: base64, signed: "{body}"}
plain: {dedupe: none}
`)
	mac := func(msg string) []byte {
		m := hmac.New(sha256.New, []byte(schemeSecret))
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	slack := func(body string) map[string]string {
		return map[string]string{"X-Slack-Signature": "v0=" + hex.EncodeToString(mac("v0:"+ts+":"+body)), "X-Slack-Request-Timestamp": ts}
	}
	ch := `{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`
	r := a.post("/v1/hooks/acme/slack", []byte(ch), slack(ch))
	mustStatus(t, r, 200)
	if r.body["challenge"] != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("slack challenge: %s", r.raw)
	}
	forged := `{"challenge":"x","type":"url_verification"}`
	mustStatus(t, a.post("/v1/hooks/acme/slack", []byte(forged), slack(ch)), 401) // unsigned: never echoed
	ev := `{"type":"event_callback","event":{"type":"message"}}`
	mustStatus(t, a.post("/v1/hooks/acme/slack", []byte(ev), slack(ev)), 202)

	get := func(path string) resp {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, a.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		return a.do(req)
	}
	tok := "Zm9vYmFy-_+/="
	r = get("/v1/hooks/acme/tw?crc_token=" + url.QueryEscape(tok))
	mustStatus(t, r, 200)
	want := "sha256=" + base64.StdEncoding.EncodeToString(mac(tok))
	if r.body["response_token"] != want {
		t.Fatalf("crc: %s, want %s", r.raw, want)
	}
	mustStatus(t, get("/v1/hooks/acme/tw"), 400)
	mustStatus(t, get("/v1/hooks/acme/tw?crc_token=a%7Bb"), 400)
	mustStatus(t, get("/v1/hooks/acme/plain?crc_token=abc"), 405)
	// The CRC answer for a token is a valid signature of a body equal to
	// it: such a body is refused.
	mustStatus(t, a.post("/v1/hooks/acme/tw", []byte(tok), map[string]string{"X-Twitter-Webhooks-Signature": want}), 401)
	body := `{"tweet_create_events":[]}`
	mustStatus(t, a.post("/v1/hooks/acme/tw", []byte(body), map[string]string{"X-Twitter-Webhooks-Signature": "sha256=" + base64.StdEncoding.EncodeToString(mac(body))}), 202)

	if n := len(a.stored()); n != 2 {
		t.Fatalf("stored %d hooks, want 2 (the two events)", n)
	}
}

const schemeSecret = "0123456789abcdef-s3cret"

// TestSchemesThroughTheEdge: presets beyond the original three and a
// custom scheme, configured in the file, verify through the whole app;
// a token source (no body signed) stores two identical legitimate bodies
// as two hooks, while a body-signing scheme without a timestamp (linear)
// dedupes on the body like GitHub.
func TestSchemesThroughTheEdge(t *testing.T) {
	t.Parallel()
	a := startAcme(t, `
slack: {verify: slack, secret: "`+schemeSecret+`", dedupe: none}
lab:   {verify: gitlab, secret: "`+schemeSecret+`"}
lin:   {verify: linear, secret: "`+schemeSecret+`"}
own:
  secret: "`+schemeSecret+`"
  verify: {type: hmac, algorithm: hmac-sha256, header: X-Sig, format: single, encoding: hex, signed: "{timestamp}|{body}", timestamp_header: X-Ts, tolerance: 60}
`)
	body := []byte(`{"event":"x"}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := func(msg string) string {
		m := hmac.New(sha256.New, []byte(schemeSecret))
		m.Write([]byte(msg))
		return hex.EncodeToString(m.Sum(nil))
	}
	slack := map[string]string{"X-Slack-Signature": "v0=" + mac("v0:"+ts+":"+string(body)), "X-Slack-Request-Timestamp": ts}
	mustStatus(t, a.post("/v1/hooks/acme/slack", body, slack), 202)
	mustStatus(t, a.post("/v1/hooks/acme/slack", body, slack), 401) // an exact replay
	mustStatus(t, a.post("/v1/hooks/acme/slack", []byte(`{"event":"y"}`), slack), 401)

	own := map[string]string{"X-Sig": mac(ts + "|" + string(body)), "X-Ts": ts}
	mustStatus(t, a.post("/v1/hooks/acme/own", body, own), 202)
	old := strconv.FormatInt(time.Now().Add(-2*time.Minute).Unix(), 10)
	mustStatus(t, a.post("/v1/hooks/acme/own", body, map[string]string{"X-Sig": mac(old + "|" + string(body)), "X-Ts": old}), 401)

	tok := map[string]string{"X-Gitlab-Token": schemeSecret}
	first := a.post("/v1/hooks/acme/lab", body, tok)
	mustStatus(t, first, 202)
	second := a.post("/v1/hooks/acme/lab", body, tok)
	mustStatus(t, second, 202)
	if first.body["id"] == second.body["id"] {
		t.Fatal("a token source deduped two identical bodies")
	}
	mustStatus(t, a.post("/v1/hooks/acme/lab", body, map[string]string{"X-Gitlab-Token": schemeSecret + "x"}), 401)

	lin := map[string]string{"Linear-Signature": mac(string(body))}
	l1 := a.post("/v1/hooks/acme/lin", body, lin)
	mustStatus(t, l1, 202)
	l2 := a.post("/v1/hooks/acme/lin", body, lin)
	mustStatus(t, l2, 200)
	if l2.body["id"] != l1.body["id"] {
		t.Fatalf("linear resend: %v, want a duplicate of %v", l2.body, l1.body["id"])
	}

	st := a.stored()
	if len(st) != 5 {
		t.Fatalf("stored %d hooks, want 5 (slack, own, lab twice, lin)", len(st))
	}
	if k := st[str(first.body["id"])].Header.Get(hooks.HeaderDedupeKey); k != "" {
		t.Fatalf("token hook stored with dedupe key %q", k)
	}
	if k := st[str(l1.body["id"])].Header.Get(hooks.HeaderDedupeKey); k != httpapi.ContentKey(body) {
		t.Fatalf("linear hook stored with dedupe key %q", k)
	}
}
