package edge_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"
)

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
