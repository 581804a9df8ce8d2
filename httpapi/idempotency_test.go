package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

const idemYAML = defaultsYAML + `tenants:
  acme:
    sources:
      api:   {dedupe: "header:Idempotency-Key"}
      evt:   {dedupe: "header:X-Event-Id"}
`

// claimRecord reads the stored claim record of tenant/source/key.
func (a *app) claimRecord(tenant, source, key string) string {
	a.t.Helper()
	kv, err := a.nats.JS.KeyValue(testkit.Context(a.t), kvstore.BucketNames(protocol.DefaultPrefix).Claims)
	if err != nil {
		a.t.Fatal(err)
	}
	e, err := kv.Get(testkit.Context(a.t), claims.KVKey(claims.ID{Tenant: tenant, Source: source, Key: key}))
	if err != nil {
		a.t.Fatalf("claim %s/%s/%s: %v", tenant, source, key, err)
	}
	return string(e.Value())
}

// TestIdempotencyKeyReused: an Idempotency-Key (auto or header:
// Idempotency-Key) reused with another body is 422 and stores nothing; the
// same body is still 200 duplicate. Provider event ids, which providers
// re-send, keep answering 200 duplicate whatever the body.
func TestIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	a := startApp(t, idemYAML)
	for _, path := range []string{"/v1/hooks/acme/api", "/v1/hooks/other/auto"} {
		h := map[string]string{"Idempotency-Key": "order-17"}
		first := a.post(path, []byte(`{"amount":10}`), h)
		mustStatus(t, first, 202)
		tenant, source, _ := strings.Cut(strings.TrimPrefix(path, "/v1/hooks/"), "/")
		want := `{"s":"c","h":"` + str(first.body["id"]) + `","d":"` + httpapi.BodyDigest([]byte(`{"amount":10}`)) + `"}`
		if rec := a.claimRecord(tenant, source, "order-17"); rec != want {
			t.Fatalf("%s: claim record %s, want %s", path, rec, want)
		}
		dup := a.post(path, []byte(`{"amount":10}`), h)
		mustStatus(t, dup, 200)
		if dup.body["id"] != first.body["id"] {
			t.Fatalf("%s: duplicate %v", path, dup.body)
		}
		reused := a.post(path, []byte(`{"amount":99}`), h)
		mustStatus(t, reused, 422)
		if reused.body["error"] != "idempotency_key_reused" || reused.hdr.Get("X-Hook-Id") != "" {
			t.Fatalf("%s: reused key answered %s", path, reused.raw)
		}
		// An empty body is another body too; the first is still a duplicate.
		mustStatus(t, a.post(path, nil, h), 422)
		mustStatus(t, a.post(path, []byte(`{"amount":10}`), h), 200)
	}
	// Provider ids: another body under the same id is a duplicate (the
	// provider re-sends; only the sender's own Idempotency-Key is checked).
	for _, c := range []struct{ path, header string }{
		{"/v1/hooks/acme/evt", "X-Event-Id"},
		{"/v1/hooks/other/auto2", "X-GitHub-Delivery"},
		{"/v1/hooks/other/auto3", "webhook-id"},
	} {
		h := map[string]string{c.header: "id-1"}
		mustStatus(t, a.post(c.path, []byte(`{"v":1}`), h), 202)
		mustStatus(t, a.post(c.path, []byte(`{"v":2}`), h), 200)
		tenant, source, _ := strings.Cut(strings.TrimPrefix(c.path, "/v1/hooks/"), "/")
		if rec := a.claimRecord(tenant, source, "id-1"); strings.Contains(rec, `"d"`) {
			t.Fatalf("%s: a provider id's claim keeps a digest: %s", c.path, rec)
		}
	}
	if n := len(a.stored()); n != 5 {
		t.Fatalf("stored %d hooks, want 5", n)
	}
}

// TestIdempotencyKeyOldRecord: a claim committed before digests were kept
// (no "d" in its record) answers any body 200 duplicate, as before.
func TestIdempotencyKeyOldRecord(t *testing.T) {
	t.Parallel()
	a := startApp(t, idemYAML)
	ctx := testkit.Context(t)
	kv, err := a.nats.JS.KeyValue(ctx, kvstore.BucketNames(protocol.DefaultPrefix).Claims)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, claims.KVKey(claims.ID{Tenant: "acme", Source: "api", Key: "old"}), []byte(`{"s":"c","h":"h-old"}`)); err != nil {
		t.Fatal(err)
	}
	r := a.post("/v1/hooks/acme/api", []byte(`{"any":"body"}`), map[string]string{"Idempotency-Key": "old"})
	mustStatus(t, r, 200)
	if r.body["id"] != "h-old" {
		t.Fatalf("duplicate of an old record: %s", r.raw)
	}
}
