package edge_test

import (
	"bytes"
	"net/http"
	"testing"
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
