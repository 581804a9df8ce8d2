package edge_test

import (
	"os"
	"strings"
	"testing"
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
