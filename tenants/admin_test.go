package tenants_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/tenants"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/webhook"
)

// fixture is a registry, policy and admin API on one embedded server.
type fixture struct {
	kit   *testkit.Kit
	reg   *tenants.Registry
	pol   *tenants.Policy
	srv   *httptest.Server
	clock *testkit.Clock // the admin's (the narrowest seam: verification takes its time as an argument)
	log   *testkit.LogBuffer
}

const fileYAML = "tenants:\n  filed:\n    sources: {raw: {}}\n"

func newFixture(t *testing.T, keys *tenants.Keyring) *fixture {
	t.Helper()
	k := testkit.New(t)
	return newFixtureOn(t, k, keys)
}

func newFixtureOn(t *testing.T, k *testkit.Kit, keys *tenants.Keyring) *fixture {
	t.Helper()
	cfg, err := config.Parse([]string{"--config", testkit.WriteTemp(t, "edge.yaml", []byte(fileYAML))}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{kit: k, clock: testkit.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)), log: &testkit.LogBuffer{}}
	log := slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b := k.Bucket(t, tenants.BucketConfig("sluice", 1))
	f.reg = tenants.NewRegistry(b, tenants.WithKeys(keys), tenants.WithLogger(log))
	if err := f.reg.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.reg.Stop)
	f.pol = tenants.NewPolicy(cfg, f.reg)
	mux := http.NewServeMux()
	admin, err := tenants.NewAdmin(f.reg, f.pol, tenants.WithLogger(log), tenants.WithTimeout(250*time.Millisecond), tenants.WithClock(f.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range admin.Routes() {
		mux.HandleFunc(r.Pattern, r.Handler)
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func keyring(t *testing.T) *tenants.Keyring {
	t.Helper()
	k, err := tenants.ParseKeyring([]byte("k1 " + newKey(t)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// do sends a JSON request and returns the status and the raw reply.
func do(t *testing.T, base, method, path, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	h := map[string]string{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h[hdr[i]] = hdr[i+1]
	}
	r := testkit.HTTP(t, method, base+path, []byte(body), h)
	return r.Code, string(r.Body), r.Header
}

func mustDo(t *testing.T, base, method, path, body string, want int, hdr ...string) string {
	t.Helper()
	code, reply, _ := do(t, base, method, path, body, hdr...)
	if code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, reply, want)
	}
	return reply
}

func githubHeaders(secret string, body []byte) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderGitHubSignature, webhook.SignGitHub(secret, body))
	h.Set(webhook.HeaderGitHubDelivery, "d-1")
	return h
}

// verifies reports whether tenant/source accepts body signed with secret
// at now.
func verifies(t *testing.T, pol *tenants.Policy, tenant, source, secret string, now time.Time) bool {
	t.Helper()
	src, err := pol.Source(tenant, source)
	if err != nil {
		t.Fatalf("source %s/%s: %v", tenant, source, err)
	}
	body := []byte(`{"n":1}`)
	_, err = src.Verify(githubHeaders(secret, body), body, now)
	return err == nil
}

const (
	oldSecret = "old-secret-0123456789-abcdef"
	newSecret = "new-secret-9876543210-fedcba"
)

// TestRotationOverlaps: after a rotation with a one-hour overlap, both
// secrets verify until the old one's not-after, then only the new one.
func TestRotationOverlaps(t *testing.T) {
	f := newFixture(t, keyring(t))
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", `{}`, 201)
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"github","dedupe":"github","secret":"`+oldSecret+`"}`, 200)
	t0 := f.clock.Now()
	if !verifies(t, f.pol, "acme", "gh", oldSecret, t0) || verifies(t, f.pol, "acme", "gh", newSecret, t0) {
		t.Fatal("before the rotation: want only the old secret")
	}
	reply := mustDo(t, f.srv.URL, "POST", "/v1/admin/tenants/acme/sources/gh/secrets", `{"secret":"`+newSecret+`","retire_others_after":"1h"}`, 200)
	var rec tenants.Tenant
	if err := json.Unmarshal([]byte(reply), &rec); err != nil {
		t.Fatal(err)
	}
	secs := rec.Sources["gh"].Secrets
	if len(secs) != 2 || secs[0].NotAfter == nil || !secs[0].NotAfter.Equal(t0.Add(time.Hour)) || secs[1].NotAfter != nil || secs[1].ID != "s2" {
		t.Fatalf("secrets after the rotation: %+v", secs)
	}
	for _, at := range []time.Duration{0, 30 * time.Minute, time.Hour - time.Second} {
		if !verifies(t, f.pol, "acme", "gh", oldSecret, t0.Add(at)) || !verifies(t, f.pol, "acme", "gh", newSecret, t0.Add(at)) {
			t.Fatalf("at +%s: want both secrets", at)
		}
	}
	for _, at := range []time.Duration{time.Hour, 2 * time.Hour} {
		if verifies(t, f.pol, "acme", "gh", oldSecret, t0.Add(at)) || !verifies(t, f.pol, "acme", "gh", newSecret, t0.Add(at)) {
			t.Fatalf("at +%s: want only the new secret", at)
		}
	}
	// Retiring the old one at once, and the last one is refused.
	mustDo(t, f.srv.URL, "DELETE", "/v1/admin/tenants/acme/sources/gh/secrets/s1", "", 200)
	if verifies(t, f.pol, "acme", "gh", oldSecret, t0) {
		t.Fatal("retired secret still verifies")
	}
	if reply := mustDo(t, f.srv.URL, "DELETE", "/v1/admin/tenants/acme/sources/gh/secrets/s2", "", 400); !strings.Contains(reply, `"field":"sources.gh.secrets"`) {
		t.Fatalf("deleting the last secret: %s", reply)
	}
}

// TestSecretsNeverShown: the raw KV value, the API's replies and the log
// hold no secret; the reply shows a fingerprint.
func TestSecretsNeverShown(t *testing.T) {
	f := newFixture(t, keyring(t))
	var replies []string
	replies = append(replies, mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", `{"limits":{"hooks":{"rate":5,"burst":10}}}`, 201))
	replies = append(replies, mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":{"scheme":"github"},"secret":"`+oldSecret+`"}`, 200))
	replies = append(replies, mustDo(t, f.srv.URL, "POST", "/v1/admin/tenants/acme/sources/gh/secrets", `{"secret":"`+newSecret+`"}`, 200))
	replies = append(replies, mustDo(t, f.srv.URL, "GET", "/v1/admin/tenants/acme", "", 200))
	replies = append(replies, mustDo(t, f.srv.URL, "GET", "/v1/admin/tenants", "", 200))
	// A bad secret's error does not echo it either.
	replies = append(replies, mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/sw", `{"verify":"standard_webhooks","secret":"whsec_`+oldSecret+`"}`, 400))
	if !strings.Contains(replies[1], `"fingerprint":"hmac-sha256:`) {
		t.Fatalf("reply without fingerprint: %s", replies[1])
	}
	raw, err := f.kit.JS.Stream(testkit.Context(t), "KV_sluice_tenants")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := raw.GetLastMsgForSubject(testkit.Context(t), "$KV.sluice_tenants.acme")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(msg.Data, []byte(`"sealed":{"kid":"k1"`)) {
		t.Fatalf("raw record is not sealed: %s", msg.Data)
	}
	for _, where := range append(replies, string(msg.Data), f.log.String()) {
		for _, s := range []string{oldSecret, newSecret, "0123456789"} {
			if strings.Contains(where, s) {
				t.Fatalf("secret %q shown in:\n%s", s, where)
			}
		}
	}
}

// TestValidationAndConflicts: 400 naming the field, 404s, the file's
// tenants are the file's, and a node without a key refuses secrets.
func TestValidationAndConflicts(t *testing.T) {
	f := newFixture(t, keyring(t))
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", `{}`, 201)
	for _, c := range []struct{ method, path, body, want string }{
		{"PUT", "/v1/admin/tenants/acme", `{"limits":{"hooks":{"rate":-1,"burst":1}}}`, `"field":"limits.hooks"`},
		{"PUT", "/v1/admin/tenants/acme", `{"source":{}}`, `unknown field \"source\"`},
		{"PUT", "/v1/admin/tenants/acme", `{"sources":{"gh":{"dedupe":"bogus:1"}}}`, `"field":"sources.gh.dedupe"`},
		{"PUT", "/v1/admin/tenants/acme", `{"sources":{"a/b":{}}}`, `"field":"sources"`},
		{"PUT", "/v1/admin/tenants/acme", `{"sources":{"gh":null}}`, `"field":"sources.gh"`},
		{"PUT", "/v1/admin/tenants/acme", `{"sources":{"gh":{"revision":1}}}`, `unknown field \"revision\"`},
		{"PUT", "/v1/admin/tenants/newco", `{"sources":{"ok":{},"gh":{"verify":"github"}}}`, `"field":"sources.gh.secret"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"bitbucket","secret":"x"}`, `"field":"sources.gh.verify.scheme"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"github"}`, `"field":"sources.gh.secret"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"secret":"abc"}`, `"field":"sources.gh.secret"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"dedupe":"bogus:1"}`, `"field":"sources.gh.dedupe"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"max_body_bytes":2147483648}`, `"field":"sources.gh.max_body_bytes"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":{"scheme":"github","params":{"hedaer":"X"}},"secret":"s"}`, `"field":"sources.gh.verify.params.hedaer"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":{"scheme":"github","params":{"type":"token"}},"secret":"s"}`, `"field":"sources.gh.verify.params.type"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":{"scheme":"hmac","params":{"tolerance":"soon"}},"secret":"s"}`, `"field":"sources.gh.verify.params.tolerance"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":{"scheme":"hmac","params":{"header":"X-Sig","algorithm":"hmac-sha256","format":"single","encoding":"hex","signed":"{timestamp}"}},"secret":"0123456789abcdef"}`, `"field":"sources.gh.verify.params"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"slack","secret":"short"}`, `"field":"sources.gh.secret"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"event_type":"header:"}`, `"field":"sources.gh.event_type"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"methods":["DELETE"]}`, `"field":"sources.gh.methods"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"content_types":["application/json; charset=utf-8"]}`, `"field":"sources.gh.content_types"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"ip_allow":["10.0.0.0/33"]}`, `"field":"sources.gh.ip_allow"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"ip_allow":[]}`, `"field":"sources.gh.ip_allow"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"handshake":"crc","verify":"slack","secret":"0123456789abcdef"}`, `"field":"sources.gh.handshake"`},
		{"PUT", "/v1/admin/tenants/acme/sources/gh", `{"handshake":"okta"}`, `"field":"sources.gh.handshake"`},
		{"POST", "/v1/admin/tenants/acme/sources/gh/secrets", `{"secret":"s","retire_others_after":"soon"}`, `"field":"retire_others_after"`},
		{"GET", "/v1/admin/tenants?limit=1001", "", `"field":"limit"`},
	} {
		if code, reply, _ := do(t, f.srv.URL, c.method, c.path, c.body); code != 400 || !strings.Contains(reply, c.want) {
			t.Errorf("%s %s %s: %d %s, want 400 with %s", c.method, c.path, c.body, code, reply, c.want)
		}
	}
	// A refused write of a tenant with its sources left nothing.
	mustDo(t, f.srv.URL, "GET", "/v1/admin/tenants/newco", ``, 404)
	if reply := mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/newco", `{"sources":{"ok":{},"v":{"verify":"github","secret":"`+oldSecret+`"}}}`, 201); !strings.Contains(reply, `"ok":{`) || !strings.Contains(reply, `"fingerprint":"hmac-sha256:`) {
		t.Fatal(reply)
	}
	// A verifying source cannot be made unsigned by leaving verify out.
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/v", `{"verify":"github","secret":"`+oldSecret+`"}`, 200)
	if reply := mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/v", `{"dedupe":"github"}`, 400); !strings.Contains(reply, `"field":"sources.v.verify"`) {
		t.Fatal(reply)
	}
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/v", `{"verify":"github","dedupe":"github"}`, 200) // secrets kept
	if !verifies(t, f.pol, "acme", "v", oldSecret, f.clock.Now()) {
		t.Fatal("secret not kept")
	}
	mustDo(t, f.srv.URL, "DELETE", "/v1/admin/tenants/acme/sources/v", ``, 200)
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/nobody/sources/gh", `{}`, 404)
	mustDo(t, f.srv.URL, "DELETE", "/v1/admin/tenants/acme/sources/gh", ``, 404)
	mustDo(t, f.srv.URL, "GET", "/v1/admin/tenants/nobody", ``, 404)
	if reply := mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/filed", `{}`, 409); !strings.Contains(reply, "managed_by_file") {
		t.Fatal(reply)
	}
	mustDo(t, f.srv.URL, "DELETE", "/v1/admin/tenants/filed", ``, 409)

	// A node without --secrets-key-file refuses to store a secret.
	g := newFixtureOn(t, f.kit, nil)
	if reply := mustDo(t, g.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"github","secret":"`+oldSecret+`"}`, 400); !strings.Contains(reply, "--secrets-key-file") {
		t.Fatal(reply)
	}
	// ... and fails closed for a record it cannot open: 503, never unsigned.
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"github","secret":"`+oldSecret+`"}`, 200)
	testkit.Eventually(t, time.Second, func() bool {
		_, err := g.pol.Source("acme", "gh")
		return errors.Is(err, httpapi.ErrSourceUnavailable)
	}, "a source whose secret does not open is unavailable")
	if !strings.Contains(g.log.String(), "source cannot verify on this node") {
		t.Fatalf("log:\n%s", g.log.String())
	}
	// Given the key (SIGHUP re-reads --secrets-key-file), it verifies.
	g.reg.ReloadKeys(f.reg.Keys())
	if !verifies(t, g.pol, "acme", "gh", oldSecret, g.clock.Now()) {
		t.Fatal("not verifying after ReloadKeys")
	}
}

// TestConcurrentUpdatesLoseNothing: concurrent writes without a revision
// are all applied (read-modify-write retried); writes with the same
// If-Match: exactly one wins, the others get 409.
func TestConcurrentUpdatesLoseNothing(t *testing.T) {
	f := newFixture(t, keyring(t))
	_, _, hdr := do(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", `{}`, "")
	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			codes[i], _, _ = do(t, f.srv.URL, "PUT", fmt.Sprintf("/v1/admin/tenants/acme/sources/s%d", i), `{"dedupe":"none"}`)
		})
	}
	wg.Wait()
	var rec tenants.Tenant
	if err := json.Unmarshal([]byte(mustDo(t, f.srv.URL, "GET", "/v1/admin/tenants/acme", "", 200)), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Sources) != n {
		t.Fatalf("codes %v: %d sources after %d concurrent adds", codes, len(rec.Sources), n)
	}
	// Same expected revision: one winner.
	etag := fmt.Sprintf(`"%d"`, rec.Revision)
	var mu sync.Mutex
	won, lost := 0, 0
	for i := range n {
		wg.Go(func() {
			code, _, _ := do(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", fmt.Sprintf(`{"limits":{"hooks":{"rate":%d,"burst":1}}}`, i+1), "If-Match", etag)
			mu.Lock()
			defer mu.Unlock()
			switch code {
			case 200:
				won++
			case 409:
				lost++
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != n-1 {
		t.Fatalf("same If-Match: %d won, %d lost", won, lost)
	}
	// A stale revision in the body is refused too.
	if code, reply, _ := do(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", fmt.Sprintf(`{"revision":%d}`, rec.Revision)); code != 409 || !strings.Contains(reply, "revision_conflict") {
		t.Fatalf("stale revision: %d %s", code, reply)
	}
	_ = hdr
}

// TestListPages: bounded pages in name order, the file's tenants among
// them.
func TestListPages(t *testing.T) {
	f := newFixture(t, keyring(t))
	for _, n := range []string{"b", "d", "a", "c"} {
		mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/"+n, `{}`, 201)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		var page struct {
			Tenants []struct{ Name, Managed string }
			Next    string
		}
		if err := json.Unmarshal([]byte(mustDo(t, f.srv.URL, "GET", "/v1/admin/tenants?limit=2&after="+after, "", 200)), &page); err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Tenants {
			got = append(got, it.Name+":"+it.Managed)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if want := "a:api b:api c:api d:api filed:file"; strings.Join(got, " ") != want {
		t.Fatalf("pages: %v, want %s", got, want)
	}
}

// TestKeyRotationReseal: with the new key first and the old one second,
// reseal moves every secret to the new key; a node with only the new key
// then verifies, and the old key is no longer needed.
func TestKeyRotationReseal(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	old, err := tenants.ParseKeyring([]byte("k1 " + k1))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, old)
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", `{}`, 201)
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/gh", `{"verify":"github","secret":"`+oldSecret+`"}`, 200)
	both, _ := tenants.ParseKeyring([]byte("k2 " + k2 + "\nk1 " + k1))
	g := newFixtureOn(t, f.kit, both)
	if reply := mustDo(t, g.srv.URL, "POST", "/v1/admin/secrets/reseal", "", 200); !strings.Contains(reply, `"resealed":1`) {
		t.Fatalf("reseal: %s", reply)
	}
	if reply := mustDo(t, g.srv.URL, "POST", "/v1/admin/secrets/reseal", "", 200); !strings.Contains(reply, `"resealed":0`) {
		t.Fatalf("second reseal: %s", reply)
	}
	newOnly, _ := tenants.ParseKeyring([]byte("k2 " + k2))
	h := newFixtureOn(t, f.kit, newOnly)
	if !verifies(t, h.pol, "acme", "gh", oldSecret, h.clock.Now()) {
		t.Fatal("a node with only the new key cannot verify after the reseal")
	}
	// The node that only has the old key now fails closed.
	testkit.Eventually(t, time.Second, func() bool {
		_, err := f.pol.Source("acme", "gh")
		return errors.Is(err, httpapi.ErrSourceUnavailable)
	}, "old-key node fails closed")
	mustDo(t, newFixtureOn(t, f.kit, nil).srv.URL, "POST", "/v1/admin/secrets/reseal", "", 400)
}

// TestSchemesInRecords: a record's verify names any preset (params
// override its fields) or describes a custom scheme; both verify through
// the policy, and only an HMAC scheme reports a signed body.
func TestSchemesInRecords(t *testing.T) {
	f := newFixture(t, keyring(t))
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme", `{}`, 201)
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/custom", `{"verify":{"scheme":"hmac","params":{"name":"acme-signer","header":"X-Sig","prefix":"sha512=","algorithm":"hmac-sha512","format":"single","encoding":"hex","signed":"{timestamp}.{body}","timestamp_header":"X-Ts","tolerance":"5m"}},"secret":"`+oldSecret+`"}`, 200)
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/key", `{"verify":{"scheme":"api_key","params":{"header":"X-Hook-Key"}},"secret":"`+newSecret+`"}`, 200)
	now := f.clock.Now()
	body := []byte(`{"n":1}`)
	ts := strconv.FormatInt(now.Unix(), 10)
	m := hmac.New(sha512.New, []byte(oldSecret))
	m.Write([]byte(ts + "." + string(body)))
	sig := "sha512=" + hex.EncodeToString(m.Sum(nil))
	src, err := f.pol.Source("acme", "custom")
	if err != nil {
		t.Fatal(err)
	}
	v, err := src.Verify(http.Header{"X-Sig": {sig}, "X-Ts": {ts}}, body, now)
	if err != nil || !v.BodySigned || v.Timestamp != now.Unix() {
		t.Fatalf("custom scheme: %+v, %v", v, err)
	}
	if _, err := src.Verify(http.Header{"X-Sig": {sig}, "X-Ts": {ts}}, []byte(`{"n":2}`), now); err == nil {
		t.Fatal("custom scheme verified another body")
	}
	if _, err := src.Verify(http.Header{"X-Sig": {sig}, "X-Ts": {ts}}, body, now.Add(6*time.Minute)); err == nil {
		t.Fatal("custom scheme verified outside its tolerance")
	}
	key, err := f.pol.Source("acme", "key")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := key.Verify(http.Header{"X-Hook-Key": {newSecret}}, body, now); err != nil || v.BodySigned {
		t.Fatalf("api_key: %+v, %v", v, err)
	}
	if _, err := key.Verify(http.Header{"X-Api-Key": {newSecret}}, body, now); err == nil {
		t.Fatal("api_key verified the preset's header after an override")
	}
	if key.EventType != nil {
		t.Fatal("an event type without event_type")
	}
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/crc", `{"handshake":"crc","verify":"github","secret":"`+oldSecret+`"}`, 200)
	crc, err := f.pol.Source("acme", "crc")
	if err != nil || crc.CRC == nil {
		t.Fatalf("crc source: %v", err)
	}
	if resp, ok := crc.CRC("abc"); !ok || resp != "sha256="+base64.StdEncoding.EncodeToString(func() []byte { m := hmac.New(sha256.New, []byte(oldSecret)); m.Write([]byte("abc")); return m.Sum(nil) }()) {
		t.Fatalf("crc answer %q", resp)
	}
	mustDo(t, f.srv.URL, "PUT", "/v1/admin/tenants/acme/sources/typed", `{"event_type":"github","methods":["put","POST"],"content_types":["text/*"],"ip_allow":["10.0.0.1","2001:db8::/32"]}`, 200)
	typed, err := f.pol.Source("acme", "typed")
	if err != nil || typed.EventType == nil || typed.EventType(http.Header{"X-Github-Event": {"push"}}, nil) != "push" {
		t.Fatalf("typed source: %v", err)
	}
	if fmt.Sprint(typed.Methods, typed.ContentTypes, typed.IPAllow) != "[PUT POST] [text/*] [10.0.0.1/32 2001:db8::/32]" {
		t.Fatalf("access: %v %v %v", typed.Methods, typed.ContentTypes, typed.IPAllow)
	}
}
