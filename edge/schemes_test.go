package edge_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/edge"
)

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
	if k := st[str(first.body["id"])].Header.Get(edge.HeaderDedupeKey); k != "" {
		t.Fatalf("token hook stored with dedupe key %q", k)
	}
	if k := st[str(l1.body["id"])].Header.Get(edge.HeaderDedupeKey); k != edge.ContentKey(body) {
		t.Fatalf("linear hook stored with dedupe key %q", k)
	}
}
