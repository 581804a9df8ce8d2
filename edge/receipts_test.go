package edge_test

import (
	"net/url"
	"testing"
)

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
