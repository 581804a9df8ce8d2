package webhook_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

// mac computes HMAC(key, msg) with crypto/hmac, independently of the code
// under test.
func mac(h func() hash.Hash, key, msg string) []byte {
	m := hmac.New(h, []byte(key))
	m.Write([]byte(msg))
	return m.Sum(nil)
}

func hexMAC(h func() hash.Hash, key, msg string) string { return hex.EncodeToString(mac(h, key, msg)) }
func b64MAC(h func() hash.Hash, key, msg string) string {
	return base64.StdEncoding.EncodeToString(mac(h, key, msg))
}

func mustPreset(t testing.TB, name string) webhook.Scheme {
	t.Helper()
	s, err := webhook.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Published vectors.
const (
	// Slack's documented example (api.slack.com/authentication/verifying-requests-from-slack).
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackTS     = "1531420618"
	slackBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackSig    = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
	// Twilio: auth token 12345 and URL from Twilio's request-validation
	// docs and twilio-python's tests/unit/test_request_validator.py
	// (expected RSOYDt4T1cUTdK1PDd93/VVr8B8= for the +14158675309 params;
	// the docs' page gives 0/KCTR6DLpKmkAf8muzZqo1nDgQ= for +12349013030).
	// Both re-checked with openssl dgst -sha1 -hmac 12345 -binary | base64.
	twilioToken = "12345"
	twilioURL   = "https://mycompany.com/myapp.php?foo=1&bar=2"
	// Standard Webhooks' specification vector, which Svix's libraries use
	// too (same secret, id, timestamp, body).
	svixID  = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	svixTS  = "1614265330"
	svixSig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	svixMsg = `{"test": 2432232314}`
)

// presetCase is one preset with a valid request and what breaks it.
type presetCase struct {
	name      string
	scheme    webhook.Scheme
	secret    string
	other     string // another secret of the same shape
	h         http.Header
	body      string
	now       int64
	want      webhook.Verified
	sigHeader string // the header that carries the signature or token
	signsBody bool
	// several returns a request with several signatures of which one
	// matches; nil for single-value schemes, where a repeated header is
	// refused as bad format.
	several func() http.Header
}

func presetCases(t *testing.T) []presetCase {
	shopifySecret := "shpss_0f7c9a1b2e3d4c5b6a7988776655443"
	shopifyBody := `{"id":820982911946154508,"email":"jon@example.com"}`
	linearSecret := "lin_wh_2b8f7d1c0e9a4f6b3d5c7e9a1b3d5f7"
	linearBody := `{"action":"create","type":"Issue","webhookTimestamp":1700000000000}`
	gitlabToken := "glt-7f3c9e2a1b5d4c8e"
	apiKey := "sk_live_4f8a2c6e0b9d7f1a"
	basicCred := "hooks:correct-horse-battery"
	twilio := mustPreset(t, webhook.PresetTwilio)
	twilio.URL = twilioURL
	twilio.MinSecretBytes = len(twilioToken) // the published vector's token is 5 bytes; real ones are 32
	twilioBody := "To=%2B18005551212&From=%2B14158675309&Digits=1234&Caller=%2B14158675309&CallSid=CA1234567890ABCDE"
	twilioDocsBody := "CallSid=CA1234567890ABCDE&Caller=%2B12349013030&Digits=1234&From=%2B12349013030&To=%2B18005551212"
	twilioDocs := twilio
	twilioDocs.Name = "twilio (docs vector)"
	svixTSn, _ := strconv.ParseInt(svixTS, 10, 64)
	slackTSn, _ := strconv.ParseInt(slackTS, 10, 64)
	otherStd := "whsec_" + base64.StdEncoding.EncodeToString([]byte("another-24-byte-key-here"))
	tol := webhook.DefaultTolerance
	return []presetCase{
		{
			name: "slack", scheme: mustPreset(t, webhook.PresetSlack), secret: slackSecret, other: "8f742231b10e8888abcd99yyyzzz85a6",
			h: hdr("X-Slack-Signature", slackSig, "X-Slack-Request-Timestamp", slackTS), body: slackBody, now: slackTSn,
			want:      webhook.Verified{MessageID: "sig:" + strings.TrimPrefix(slackSig, "v0="), Timestamp: slackTSn, Tolerance: tol},
			sigHeader: "X-Slack-Signature", signsBody: true,
		},
		{
			name: "twilio", scheme: twilio, secret: twilioToken, other: "12346",
			h: hdr("X-Twilio-Signature", "RSOYDt4T1cUTdK1PDd93/VVr8B8="), body: twilioBody, now: 1700000000,
			sigHeader: "X-Twilio-Signature", signsBody: true,
		},
		{
			name: "twilio docs", scheme: twilioDocs, secret: twilioToken, other: "12346",
			h: hdr("X-Twilio-Signature", "0/KCTR6DLpKmkAf8muzZqo1nDgQ="), body: twilioDocsBody, now: 1700000000,
			sigHeader: "X-Twilio-Signature", signsBody: true,
		},
		{
			name: "svix", scheme: mustPreset(t, webhook.PresetSvix), secret: stdSecret, other: otherStd,
			h: hdr("svix-id", svixID, "svix-timestamp", svixTS, "svix-signature", svixSig), body: svixMsg, now: svixTSn,
			want:      webhook.Verified{MessageID: svixID, Timestamp: svixTSn, Tolerance: tol},
			sigHeader: "svix-signature", signsBody: true,
			several: func() http.Header {
				return hdr("svix-id", svixID, "svix-timestamp", svixTS, "svix-signature", "v1,"+b64MAC(sha256.New, "x", "y")+" v1a,xyz "+svixSig)
			},
		},
		{
			name: "standard_webhooks via svix headers", scheme: mustPreset(t, webhook.PresetStandard), secret: stdSecret, other: otherStd,
			h: hdr("svix-id", svixID, "svix-timestamp", svixTS, "svix-signature", svixSig), body: svixMsg, now: svixTSn,
			want:      webhook.Verified{MessageID: svixID, Timestamp: svixTSn, Tolerance: tol},
			sigHeader: "svix-signature", signsBody: true,
			several: func() http.Header {
				return hdr("svix-id", svixID, "svix-timestamp", svixTS, "svix-signature", "v1,"+b64MAC(sha256.New, "x", "y"), "svix-signature", svixSig)
			},
		},
		{
			name: "github docs vector", scheme: mustPreset(t, webhook.PresetGitHub), secret: ghSecret, other: ghSecret + "!",
			h:    hdr(webhook.HeaderGitHubSignature, "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17", webhook.HeaderGitHubDelivery, "d-9"),
			body: "Hello, World!", now: 1700000000, want: webhook.Verified{MessageID: "d-9"},
			sigHeader: webhook.HeaderGitHubSignature, signsBody: true,
		},
		{
			name: "stripe", scheme: mustPreset(t, webhook.PresetStripe), secret: stripeSecret, other: stripeSecret + "x",
			h:    hdr(webhook.HeaderStripeSignature, "t=1700000000,v1="+hexMAC(sha256.New, stripeSecret, `1700000000.{"id":"evt_9"}`)),
			body: `{"id":"evt_9"}`, now: 1700000000, want: webhook.Verified{MessageID: "evt_9", Timestamp: 1700000000, Tolerance: tol},
			sigHeader: webhook.HeaderStripeSignature, signsBody: true,
			several: func() http.Header {
				return hdr(webhook.HeaderStripeSignature, "t=1700000000,v1="+strings.Repeat("ab", 32)+",v0=00,v1="+hexMAC(sha256.New, stripeSecret, `1700000000.{"id":"evt_9"}`))
			},
		},
		{
			// Hand-computed: base64 HMAC-SHA256 of the raw body (Shopify's
			// docs give the algorithm, no vector).
			name: "shopify", scheme: mustPreset(t, webhook.PresetShopify), secret: shopifySecret, other: shopifySecret + "0",
			h:    hdr("X-Shopify-Hmac-Sha256", b64MAC(sha256.New, shopifySecret, shopifyBody), "X-Shopify-Webhook-Id", "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"),
			body: shopifyBody, now: 1700000000, want: webhook.Verified{MessageID: "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"},
			sigHeader: "X-Shopify-Hmac-Sha256", signsBody: true,
		},
		{
			// Hand-computed: hex HMAC-SHA256 of the raw body.
			name: "linear", scheme: mustPreset(t, webhook.PresetLinear), secret: linearSecret, other: linearSecret + "0",
			h:    hdr("Linear-Signature", hexMAC(sha256.New, linearSecret, linearBody), "Linear-Delivery", "234d1a4e-b617-4388-90fe-adc3633d6b72"),
			body: linearBody, now: 1700000000, want: webhook.Verified{MessageID: "234d1a4e-b617-4388-90fe-adc3633d6b72"},
			sigHeader: "Linear-Signature", signsBody: true,
		},
		{
			name: "gitlab", scheme: mustPreset(t, webhook.PresetGitLab), secret: gitlabToken, other: gitlabToken + "0",
			h: hdr("X-Gitlab-Token", gitlabToken), body: `{"object_kind":"push"}`, now: 1700000000, sigHeader: "X-Gitlab-Token",
		},
		{
			name: "api_key", scheme: mustPreset(t, webhook.PresetAPIKey), secret: apiKey, other: apiKey + "0",
			h: hdr("X-API-Key", apiKey), body: `{}`, now: 1700000000, sigHeader: "X-API-Key",
		},
		{
			name: "basic", scheme: mustPreset(t, webhook.PresetBasic), secret: basicCred, other: basicCred + "0",
			h:    hdr("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(basicCred))),
			body: `{}`, now: 1700000000, sigHeader: "Authorization",
		},
	}
}

func reasonIs(t *testing.T, what string, v webhook.Verified, err error, reason string) {
	t.Helper()
	if !errors.Is(err, webhook.ErrVerification) || !strings.Contains(err.Error(), reason) {
		t.Fatalf("%s: Verify = %+v, %v; want ErrVerification: %s", what, v, err, reason)
	}
	if v != (webhook.Verified{}) {
		t.Fatalf("%s: failed Verify returned %+v", what, v)
	}
}

// TestPresetVectors verifies each preset's published or hand-computed
// vector, then the ways it must fail: another secret, a tampered body, a
// stale or future timestamp, a missing or malformed header, and several
// signatures of which one matches.
func TestPresetVectors(t *testing.T) {
	for _, tc := range presetCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			v, err := webhook.NewSchemeVerifier(tc.scheme, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(tc.now, 0)
			got, err := v.Verify(tc.h, []byte(tc.body), now)
			want := tc.want
			want.BodySigned = tc.scheme.Type == webhook.SchemeHMAC // a token or basic auth signs no body
			if err != nil || got != want {
				t.Fatalf("Verify = %+v, %v; want %+v", got, err, want)
			}

			wrong, err := webhook.NewSchemeVerifier(tc.scheme, tc.other)
			if err != nil {
				t.Fatal(err)
			}
			got, err = wrong.Verify(tc.h, []byte(tc.body), now)
			reasonIs(t, "other secret", got, err, "no matching signature")

			if tc.signsBody {
				got, err = v.Verify(tc.h, []byte(tc.body+"x"), now)
				reasonIs(t, "tampered body", got, err, "no matching signature")
			} else if _, err := v.Verify(tc.h, []byte(tc.body+"x"), now); err != nil {
				t.Fatalf("a token does not sign the body: %v", err)
			}

			if tc.want.Timestamp != 0 {
				for _, skew := range []time.Duration{-301 * time.Second, 301 * time.Second} {
					got, err = v.Verify(tc.h, []byte(tc.body), now.Add(skew))
					reasonIs(t, "skew "+skew.String(), got, err, "timestamp outside tolerance")
				}
				for _, skew := range []time.Duration{-300 * time.Second, 300 * time.Second} {
					if _, err := v.Verify(tc.h, []byte(tc.body), now.Add(skew)); err != nil {
						t.Fatalf("skew %s within tolerance: %v", skew, err)
					}
				}
			}

			h := tc.h.Clone()
			h.Del(tc.sigHeader)
			got, err = v.Verify(h, []byte(tc.body), now)
			reasonIs(t, "missing header", got, err, "missing header")

			h = tc.h.Clone()
			h.Set(tc.sigHeader, "%%%garbage%%%")
			if got, err = v.Verify(h, []byte(tc.body), now); !errors.Is(err, webhook.ErrVerification) || got != (webhook.Verified{}) {
				t.Fatalf("malformed header: %+v, %v", got, err)
			}

			if tc.several != nil {
				if got, err := v.Verify(tc.several(), []byte(tc.body), now); err != nil || got != want {
					t.Fatalf("several signatures, one matching: %+v, %v", got, err)
				}
			} else {
				h = tc.h.Clone()
				h.Add(tc.sigHeader, tc.h.Get(tc.sigHeader))
				got, err = v.Verify(h, []byte(tc.body), now)
				reasonIs(t, "repeated header", got, err, "bad format")
			}

			// Printing or marshalling never shows the secret.
			j, _ := json.Marshal(v)
			out := fmt.Sprintf("%v %+v %#v %s %q", v, v, v, v, v) + string(j)
			if strings.Contains(out, tc.secret) || string(j) != strconv.Quote(tc.scheme.Name) {
				t.Fatalf("output %s leaks the secret or misnames the scheme", out)
			}
		})
	}
}

// TestSlackStaleTimestamp: Slack's published vector is stale today (2018):
// it verifies only near its own time.
func TestSlackStaleTimestamp(t *testing.T) {
	v, err := webhook.NewSchemeVerifier(mustPreset(t, webhook.PresetSlack), slackSecret)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Verify(hdr("X-Slack-Signature", slackSig, "X-Slack-Request-Timestamp", slackTS), []byte(slackBody), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reasonIs(t, "stale", got, err, "timestamp outside tolerance")
}

// TestTwilioForm: the form parameters are signed sorted and decoded, so
// their order in the body does not matter but their values do; a body that
// is not a form fails as bad format.
func TestTwilioForm(t *testing.T) {
	s := mustPreset(t, webhook.PresetTwilio)
	s.URL = "https://hooks.example.com/v1/hooks/acme/sms"
	secret := "0123456789abcdef0123456789abcdef"
	v, err := webhook.NewSchemeVerifier(s, secret)
	if err != nil {
		t.Fatal(err)
	}
	// Independently: URL, then name+value sorted by name, then value.
	sig := b64MAC(sha1.New, secret, s.URL+"Bodyhi thereFromaFromb")
	for _, body := range []string{"From=b&Body=hi+there&From=a", "Body=hi%20there&From=a&From=b"} {
		if _, err := v.Verify(hdr("X-Twilio-Signature", sig), []byte(body), t0); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	got, err := v.Verify(hdr("X-Twilio-Signature", sig), []byte("From=b&Body=hi+there&From=c"), t0)
	reasonIs(t, "other value", got, err, "no matching signature")
	got, err = v.Verify(hdr("X-Twilio-Signature", sig), []byte("a=%zz"), t0)
	reasonIs(t, "not a form", got, err, "bad format")
	// The URL is the configured one: the same request signed for another
	// URL fails.
	other := b64MAC(sha1.New, secret, "https://evil.example/v1/hooks/acme/sms"+"Bodyhi thereFromaFromb")
	got, err = v.Verify(hdr("X-Twilio-Signature", other), []byte("From=b&Body=hi+there&From=a"), t0)
	reasonIs(t, "other url", got, err, "no matching signature")
}

// TestCustomSchemes: declarative schemes beyond the presets, each with a
// hand-computed vector.
func TestCustomSchemes(t *testing.T) {
	for _, tc := range customCases() {
		t.Run(tc.name, func(t *testing.T) {
			v, err := webhook.NewSchemeVerifier(tc.s, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want
			want.BodySigned = tc.s.Type == webhook.SchemeHMAC
			if got, err := v.Verify(tc.h, []byte(customBody), t0); err != nil || got != want {
				t.Fatalf("Verify = %+v, %v; want %+v", got, err, want)
			}
			if tc.s.Type == "hmac" {
				got, err := v.Verify(tc.h, []byte(customBody+" "), t0)
				reasonIs(t, "tampered", got, err, "no matching signature")
			}
			if v.Name() != tc.s.Type || v.Scheme() != tc.s {
				t.Fatalf("Name = %q, Scheme = %+v", v.Name(), v.Scheme())
			}
		})
	}
}

// customBody is what customCases sign (at t0).
const customBody = `{"event":"order.paid","id":"ord_7"}`

// customCase is a declarative scheme beyond the presets with a valid
// request for customBody at t0.
type customCase struct {
	name   string
	s      webhook.Scheme
	secret string
	h      http.Header
	want   webhook.Verified
}

func customCases() []customCase {
	body := customBody
	ts := "1700000000"
	secret := "custom-signing-secret-0001"
	b64Secret := base64.StdEncoding.EncodeToString([]byte("raw key bytes, 24 long!!"))
	return []customCase{
		{
			"hmac-sha512 hex with prefix",
			webhook.Scheme{Type: "hmac", Algorithm: "hmac-sha512", Header: "X-Signature", Format: "single", Prefix: "sha512=", Encoding: "hex", Signed: "{body}"},
			secret, hdr("X-Signature", "sha512="+hexMAC(sha512.New, secret, body)), webhook.Verified{},
		},
		{
			"hmac-sha1 hex",
			webhook.Scheme{Type: "hmac", Algorithm: "hmac-sha1", Header: "X-Hub-Signature", Format: "single", Prefix: "sha1=", Encoding: "hex", Signed: "{body}"},
			secret, hdr("X-Hub-Signature", "sha1="+hexMAC(sha1.New, secret, body)), webhook.Verified{},
		},
		{
			"kv, base64, sha512, two signatures",
			webhook.Scheme{Type: "hmac", Algorithm: "hmac-sha512", Header: "X-Sig", Format: "kv", TimestampKey: "ts", SignatureKey: "s", Encoding: "base64", Signed: "{timestamp}.{body}", Tolerance: time.Minute, IDJSON: "id"},
			secret, hdr("X-Sig", "ts="+ts+",s="+b64MAC(sha512.New, "old", ts+"."+body)+", s="+b64MAC(sha512.New, secret, ts+"."+body)),
			webhook.Verified{MessageID: "ord_7", Timestamp: 1700000000, Tolerance: time.Minute},
		},
		{
			"list separated by commas, timestamp and id headers, base64 secret",
			webhook.Scheme{
				Type: "hmac", Algorithm: "hmac-sha256", Header: "X-Signatures", Format: "list", Separator: ",", Encoding: "hex",
				Signed: "{id}.{timestamp}.{body}", IDHeader: "X-Message-Id", TimestampHeader: "X-Timestamp", Tolerance: 5 * time.Minute, SecretEncoding: "base64",
			},
			b64Secret,
			hdr("X-Signatures", strings.Repeat("0", 64)+", "+hexMAC(sha256.New, "raw key bytes, 24 long!!", "m-1."+ts+"."+body), "X-Message-Id", "m-1", "X-Timestamp", ts),
			webhook.Verified{MessageID: "m-1", Timestamp: 1700000000, Tolerance: 5 * time.Minute},
		},
		{
			"url and body",
			webhook.Scheme{Type: "hmac", Algorithm: "hmac-sha256", Header: "X-Sig", Format: "single", Encoding: "base64", Signed: "{url}|{body}", URL: "https://hooks.example.com/v1/hooks/acme/x"},
			secret, hdr("X-Sig", b64MAC(sha256.New, secret, "https://hooks.example.com/v1/hooks/acme/x|"+body)), webhook.Verified{},
		},
		{
			"bearer token",
			webhook.Scheme{Type: "token", Header: "Authorization", Prefix: "Bearer "},
			secret, hdr("Authorization", "Bearer "+secret), webhook.Verified{},
		},
		{
			"basic",
			webhook.Scheme{Type: "basic"},
			"hooks:" + secret, hdr("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("hooks:"+secret))), webhook.Verified{},
		},
	}
}

// TestSchemeValidation: a scheme that cannot verify correctly is refused at
// construction with a reason, never turned into a verifier.
func TestSchemeValidation(t *testing.T) {
	base := func() webhook.Scheme {
		return webhook.Scheme{
			Type: "hmac", Algorithm: "hmac-sha256", Header: "X-Sig", Format: "single", Encoding: "hex",
			Signed: "{timestamp}.{body}", TimestampHeader: "X-Ts", Tolerance: 5 * time.Minute,
		}
	}
	if err := base().Validate(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		mut    func(*webhook.Scheme)
		reason string
	}{
		{"zero", func(s *webhook.Scheme) { *s = webhook.Scheme{} }, "type is missing"},
		{"unknown type", func(s *webhook.Scheme) { s.Type = "rsa" }, `unknown type "rsa"`},
		{"no algorithm", func(s *webhook.Scheme) { s.Algorithm = "" }, "algorithm is missing"},
		{"unknown algorithm", func(s *webhook.Scheme) { s.Algorithm = "hmac-md5" }, `unknown algorithm "hmac-md5"`},
		{"no header", func(s *webhook.Scheme) { s.Header = "" }, "header is missing"},
		{"bad header", func(s *webhook.Scheme) { s.Header = "X Sig" }, "is not a header name"},
		{"bad timestamp header", func(s *webhook.Scheme) { s.TimestampHeader = "X:Ts" }, "is not a header name"},
		{"no encoding", func(s *webhook.Scheme) { s.Encoding = "" }, "encoding is missing"},
		{"unknown encoding", func(s *webhook.Scheme) { s.Encoding = "base32" }, `unknown encoding "base32"`},
		{"no format", func(s *webhook.Scheme) { s.Format = "" }, "format is missing"},
		{"unknown format", func(s *webhook.Scheme) { s.Format = "csv" }, `unknown format "csv"`},
		{"no signed", func(s *webhook.Scheme) { s.Signed = "" }, "signed is missing"},
		{"body not signed", func(s *webhook.Scheme) { s.Signed = "{timestamp}" }, "signs no body"},
		{"repeated placeholder", func(s *webhook.Scheme) { s.Signed = "{timestamp}{body}{body}" }, "repeats {body}"},
		{"unknown placeholder", func(s *webhook.Scheme) { s.Signed = "{timestamp}.{bdy}" }, `unknown placeholder "{bdy}"`},
		{"open brace", func(s *webhook.Scheme) { s.Signed = "{timestamp}.{body" }, "unbalanced brace"},
		{"close brace", func(s *webhook.Scheme) { s.Signed = "{timestamp}}{body}" }, "unbalanced brace"},
		{"long template", func(s *webhook.Scheme) { s.Signed = "{timestamp}{body}" + strings.Repeat(".", 300) }, "longer than"},
		{"no tolerance", func(s *webhook.Scheme) { s.Tolerance = 0 }, "tolerance must be"},
		{"negative tolerance", func(s *webhook.Scheme) { s.Tolerance = -time.Second }, "tolerance must be"},
		{"huge tolerance", func(s *webhook.Scheme) { s.Tolerance = 2 * time.Hour }, "tolerance must be"},
		{"sub-second tolerance", func(s *webhook.Scheme) { s.Tolerance = 1500 * time.Millisecond }, "tolerance must be whole seconds"},
		{"no timestamp source", func(s *webhook.Scheme) { s.TimestampHeader = "" }, "exactly one of timestamp_header and timestamp_key"},
		{"unsigned timestamp", func(s *webhook.Scheme) { s.Signed = "{body}" }, "cannot be trusted"},
		{"tolerance without timestamp", func(s *webhook.Scheme) { s.Signed, s.TimestampHeader = "{body}", "" }, "tolerance without a signed timestamp"},
		{"{id} without header", func(s *webhook.Scheme) { s.Signed = "{id}.{timestamp}.{body}" }, "id_header must be given and signed"},
		{"unsigned id with a timestamp", func(s *webhook.Scheme) { s.IDHeader = "X-Id" }, "id_header must be given and signed"},
		{"id header and json", func(s *webhook.Scheme) { s.Signed, s.IDHeader, s.IDJSON = "{id}.{timestamp}.{body}", "X-Id", "id" }, "exclusive"},
		{"id json bad path", func(s *webhook.Scheme) { s.IDJSON = "a..b" }, "is not a dot path"},
		{"id json without body", func(s *webhook.Scheme) {
			s.Signed, s.URL, s.IDJSON = "{timestamp}{url}{form}", "https://x.example/", "id"
		}, "id_json needs a signed {body}"},
		{"{url} without url", func(s *webhook.Scheme) { s.Signed = "{url}{timestamp}{body}" }, "url must be given and signed"},
		{"url not signed", func(s *webhook.Scheme) { s.URL = "https://x.example/" }, "url must be given and signed"},
		{"url not http", func(s *webhook.Scheme) { s.Signed, s.URL = "{url}{timestamp}{body}", "ftp://x.example/" }, "absolute http(s) URL"},
		{"url with user", func(s *webhook.Scheme) { s.Signed, s.URL = "{url}{timestamp}{body}", "https://u:p@x.example/" }, "absolute http(s) URL"},
		{"url relative", func(s *webhook.Scheme) { s.Signed, s.URL = "{url}{timestamp}{body}", "/v1/hooks/a/b" }, "absolute http(s) URL"},
		{"long prefix", func(s *webhook.Scheme) { s.Prefix = strings.Repeat("p", 65) }, "prefix longer than"},
		{"single with key", func(s *webhook.Scheme) { s.SignatureKey = "v1" }, "single format takes no"},
		{"list without separator", func(s *webhook.Scheme) { s.Format = "list" }, "list format needs a separator"},
		{"list separator in prefix", func(s *webhook.Scheme) { s.Format, s.Separator, s.Prefix = "list", ",", "v1," }, "list format needs a separator"},
		{"list with key", func(s *webhook.Scheme) { s.Format, s.Separator, s.SignatureKey = "list", " ", "v1" }, "list format takes no"},
		{"kv without key", func(s *webhook.Scheme) { s.Format = "kv" }, "kv format needs a signature_key"},
		{"kv same keys", func(s *webhook.Scheme) {
			s.Format, s.SignatureKey, s.TimestampKey, s.TimestampHeader = "kv", "t", "t", ""
		}, "kv format needs a signature_key"},
		{"kv with prefix", func(s *webhook.Scheme) { s.Format, s.SignatureKey, s.Prefix = "kv", "v1", "x" }, "kv format takes no"},
		{"kv timestamp twice", func(s *webhook.Scheme) { s.Format, s.SignatureKey, s.TimestampKey = "kv", "v1", "t" }, "exactly one of timestamp_header and timestamp_key"},
		{"secret encoding", func(s *webhook.Scheme) { s.SecretEncoding = "hex" }, `unknown secret encoding "hex"`},
		{"negative min secret", func(s *webhook.Scheme) { s.MinSecretBytes = -1 }, "must not be negative"},
		{"fallback without header", func(s *webhook.Scheme) { s.Fallback = &webhook.HeaderNames{TimestampHeader: "Y-Ts"} }, "fallback.header is missing"},
		{"fallback other kinds", func(s *webhook.Scheme) { s.Fallback = &webhook.HeaderNames{Header: "Y-Sig"} }, "same kinds of headers"},
		{"token without header", func(s *webhook.Scheme) { *s = webhook.Scheme{Type: "token"} }, "header is missing"},
		{"token with hmac fields", func(s *webhook.Scheme) { s.Type = "token" }, "token does not use algorithm, encoding, format, signed, timestamp_header, tolerance"},
		{"basic other header", func(s *webhook.Scheme) { *s = webhook.Scheme{Type: "basic", Header: "X-Auth"} }, "basic uses the Authorization header"},
		{"basic with prefix", func(s *webhook.Scheme) { *s = webhook.Scheme{Type: "basic", Prefix: "Basic "} }, "basic does not use prefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mut(&s)
			err := s.Validate()
			if !errors.Is(err, webhook.ErrInvalidScheme) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Validate = %v; want ErrInvalidScheme: %s", err, tc.reason)
			}
			if v, err2 := webhook.NewSchemeVerifier(s, "a-long-enough-secret-value"); v != nil || err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("NewSchemeVerifier = %v, %v; want the same error", v, err2)
			}
		})
	}
	// A preset that needs configuration fails closed without it.
	if _, err := webhook.NewSchemeVerifier(mustPreset(t, webhook.PresetTwilio), "0123456789abcdef0123456789abcdef"); !errors.Is(err, webhook.ErrInvalidScheme) || !strings.Contains(err.Error(), "twilio: url must be given") {
		t.Fatalf("twilio without url: %v", err)
	}
	if _, err := webhook.Preset("gitlab-ci"); !errors.Is(err, webhook.ErrUnknownVerifier) {
		t.Fatalf("unknown preset: %v", err)
	}
}

// TestSchemeSecrets: empty, short and malformed secrets are refused, naming
// the scheme and the length, never the secret.
func TestSchemeSecrets(t *testing.T) {
	hmacS := webhook.Scheme{Type: "hmac", Algorithm: "hmac-sha256", Header: "X-Sig", Format: "single", Encoding: "hex", Signed: "{body}"}
	b64S := hmacS
	b64S.SecretEncoding = "base64"
	cases := []struct {
		name   string
		s      webhook.Scheme
		secret string
		reason string
	}{
		{"empty", hmacS, "", "secret is empty"},
		{"short raw", hmacS, "fifteen-bytes-x", "at least 16 bytes, got 15"},
		{"huge", hmacS, strings.Repeat("k", 5000), "longer than"},
		{"not base64", b64S, "not*base64!not*base64!", "secret must be base64"},
		{"short base64", b64S, base64.StdEncoding.EncodeToString([]byte("15-bytes-secret")), "at least 16 bytes, got 15"},
		{"whsec empty", mustPreset(t, webhook.PresetSvix), "whsec_", "secret is empty"},
		{"whsec short", mustPreset(t, webhook.PresetSvix), "whsec_YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnc=", "at least 24 bytes, got 23"},
		{"twilio short", func() webhook.Scheme { s := mustPreset(t, webhook.PresetTwilio); s.URL = twilioURL; return s }(), "12345", "at least 16 bytes, got 5"},
		{"basic without colon", mustPreset(t, webhook.PresetBasic), "just-a-long-password", "user:password"},
		{"basic empty user", mustPreset(t, webhook.PresetBasic), ":just-a-long-password", "user:password"},
		{"basic short password", mustPreset(t, webhook.PresetBasic), "a-long-user-name:pw", "at least 16 bytes, got 2"},
		{"gitlab short", mustPreset(t, webhook.PresetGitLab), "token", "at least 16 bytes, got 5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := webhook.NewSchemeVerifier(tc.s, tc.secret)
			if v != nil || !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("NewSchemeVerifier = %v, %v; want ErrInvalidSecret: %s", v, err, tc.reason)
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("error %q leaks the secret", err)
			}
		})
	}
}

// TestPresetsValid: every preset but twilio (which needs its URL) is a
// valid scheme, and Preset hands out copies.
func TestPresetsValid(t *testing.T) {
	for _, name := range webhook.Presets() {
		s := mustPreset(t, name)
		if s.Name != name {
			t.Errorf("%s: Name = %q", name, s.Name)
		}
		err := s.Validate()
		if (name == webhook.PresetTwilio) != (err != nil) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
	a := mustPreset(t, webhook.PresetStandard)
	a.Fallback.Header = "changed"
	if b := mustPreset(t, webhook.PresetStandard); b.Fallback.Header != webhook.HeaderSvixSignature {
		t.Fatal("Preset shares its fallback")
	}
	// A verifier shares nothing with its caller: changing the scheme it
	// was built from, or the one it returns, changes nothing.
	s := mustPreset(t, webhook.PresetStandard)
	v, err := webhook.NewSchemeVerifier(s, stdSecret)
	if err != nil {
		t.Fatal(err)
	}
	s.Fallback.Header = "X-Other"
	v.Scheme().Fallback.Header = "X-Other"
	if got := v.Scheme().Fallback.Header; got != webhook.HeaderSvixSignature {
		t.Fatalf("verifier fallback changed to %q", got)
	}
}

// TestSchemeByName: a scheme with a name and no type is that preset, with
// the fields it sets overriding the preset's (the form a source record's
// verify: takes).
func TestSchemeByName(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef"
	url := "https://hooks.example.com/v1/hooks/acme/sms"
	v, err := webhook.NewSchemeVerifier(webhook.Scheme{Name: "twilio", URL: url}, secret)
	if err != nil {
		t.Fatal(err)
	}
	if s := v.Scheme(); s.Type != "hmac" || s.Algorithm != "hmac-sha1" || s.URL != url || v.Name() != "twilio" {
		t.Fatalf("resolved %+v", s)
	}
	if _, err := v.Verify(hdr("X-Twilio-Signature", b64MAC(sha1.New, secret, url+"Bodyhi")), []byte("Body=hi"), t0); err != nil {
		t.Fatal(err)
	}
	k, err := webhook.NewSchemeVerifier(webhook.Scheme{Name: "api_key", Header: "X-Hook-Key"}, secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(hdr("X-Hook-Key", secret), nil, t0); err != nil {
		t.Fatal(err)
	}
	got, err := k.Verify(hdr("X-API-Key", secret), nil, t0)
	reasonIs(t, "preset header replaced", got, err, "missing header")
	// Overrides are validated like any scheme: a slack preset whose
	// timestamp is no longer signed is refused.
	if err := (webhook.Scheme{Name: "slack", Signed: "{body}"}).Validate(); !errors.Is(err, webhook.ErrInvalidScheme) || !strings.Contains(err.Error(), "cannot be trusted") {
		t.Fatalf("slack without a signed timestamp: %v", err)
	}
	if err := (webhook.Scheme{Name: "nope"}).Validate(); !errors.Is(err, webhook.ErrUnknownVerifier) {
		t.Fatalf("unknown preset name: %v", err)
	}
}
