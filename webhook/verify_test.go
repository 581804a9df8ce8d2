package webhook_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

const (
	stdSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	stripeSecret = "whsec_test_secret_2f8a1c"
	ghSecret     = "It's a Secret to Everybody"
)

var t0 = time.Unix(1700000000, 0)

// TestSpecVectors pins the providers' published vectors through the Sign
// helpers (the fixtures check them through Verify).
func TestSpecVectors(t *testing.T) {
	if got, want := webhook.SignGitHub(ghSecret, []byte("Hello, World!")),
		"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"; got != want {
		t.Errorf("SignGitHub = %s; want %s", got, want)
	}
	got, err := webhook.SignStandard(stdSecret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; err != nil || got != want {
		t.Errorf("SignStandard = %s, %v; want %s", got, err, want)
	}
	body := `{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","type":"payment_intent.succeeded"}`
	if got, want := webhook.SignStripe(stripeSecret, 1700000000, []byte(body)),
		"t=1700000000,v1=607642e08c440c6407e1914ecf8c118603d795dd0f36242e48fe177371cc8047"; got != want {
		t.Errorf("SignStripe = %s; want %s", got, want)
	}
}

// TestSignVerifyRoundTrip: what the Sign helpers produce verifies, with the
// expected replay parts.
func TestSignVerifyRoundTrip(t *testing.T) {
	body := []byte(`{"id":"evt_42","n":1}`)
	ts := t0.Unix()

	gh, _ := webhook.NewGitHub(ghSecret)
	h := http.Header{}
	h.Set(webhook.HeaderGitHubSignature, webhook.SignGitHub(ghSecret, body))
	h.Set(webhook.HeaderGitHubDelivery, "d-1")
	v, err := gh.Verify(h, body, t0)
	if err != nil || v != (webhook.Verified{MessageID: "d-1", BodySigned: true}) {
		t.Fatalf("github: %+v, %v", v, err)
	}
	if _, ok := v.ReplayKey(); ok {
		t.Fatal("github: a replay key without a timestamp")
	}

	st, _ := webhook.NewStripe(stripeSecret)
	h = http.Header{}
	h.Set(webhook.HeaderStripeSignature, webhook.SignStripe(stripeSecret, ts, body))
	v, err = st.Verify(h, body, t0)
	want := webhook.Verified{MessageID: "evt_42", Timestamp: ts, Tolerance: 300 * time.Second, BodySigned: true}
	if err != nil || v != want {
		t.Fatalf("stripe: %+v, %v; want %+v", v, err, want)
	}

	sw, _ := webhook.NewStandard(stdSecret)
	h, err = webhook.StandardHeaders(stdSecret, "msg_1", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	v, err = sw.Verify(h, body, t0)
	want = webhook.Verified{MessageID: "msg_1", Timestamp: ts, Tolerance: 300 * time.Second, BodySigned: true}
	if err != nil || v != want {
		t.Fatalf("standard: %+v, %v; want %+v", v, err, want)
	}
	if k, ok := v.ReplayKey(); !ok || k != "msg_1/"+strconv.FormatInt(ts, 10) {
		t.Fatalf("ReplayKey = %q, %v", k, ok)
	}
}

// TestVerifyRejects covers malformed and hostile headers for each provider.
func TestVerifyRejects(t *testing.T) {
	body := []byte(`{"id":"evt_1"}`)
	ts := t0.Unix()
	goodStripe := webhook.SignStripe(stripeSecret, ts, body)
	goodStd, _ := webhook.SignStandard(stdSecret, "msg_1", ts, body)
	manyStripe := "t=" + strconv.FormatInt(ts, 10) + strings.Repeat(",v1=00", webhook.MaxSignatures) + "," + strings.TrimPrefix(goodStripe, "t="+strconv.FormatInt(ts, 10)+",")
	manyStd := strings.Repeat("v1,AAAA ", webhook.MaxSignatures) + goodStd
	huge := strings.Repeat("x", webhook.MaxSignatureHeaderBytes+1)

	std := func(id, ts, sig string) http.Header {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		return h
	}
	one := func(k, v string) http.Header { h := http.Header{}; h.Set(k, v); return h }
	tss := strconv.FormatInt(ts, 10)

	cases := []struct {
		name     string
		verifier string
		secret   string
		h        http.Header
		reason   string
	}{
		{"github empty", "github", ghSecret, one(webhook.HeaderGitHubSignature, ""), "missing header"},
		{"github two values", "github", ghSecret, http.Header{webhook.HeaderGitHubSignature: {webhook.SignGitHub(ghSecret, body), webhook.SignGitHub(ghSecret, body)}}, "bad format"},
		{"github huge", "github", ghSecret, one(webhook.HeaderGitHubSignature, "sha256="+huge), "too large"},
		{"github not hex", "github", ghSecret, one(webhook.HeaderGitHubSignature, "sha256="+strings.Repeat("zz", 32)), "bad format"},
		{"stripe too many v1", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, manyStripe), "too many signatures"},
		{"stripe huge", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, goodStripe+","+huge), "too large"},
		{"stripe huge split over values", "stripe", stripeSecret, http.Header{webhook.HeaderStripeSignature: {goodStripe, huge[:webhook.MaxSignatureHeaderBytes-len(goodStripe)]}}, "too large"},
		{"stripe two t", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "t="+tss+","+goodStripe), "bad format"},
		{"stripe empty t", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "t=,v1=00"), "bad format"},
		{"stripe t overflow", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "t=99999999999999999999999,v1=00"), "bad format"},
		{"stripe negative t", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "t=-1,v1=00"), "bad format"},
		{"stripe t=0", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "t=0,v1=00"), "timestamp outside tolerance"},
		{"stripe v1 not hex", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "t="+tss+",v1=xyz"), "no matching signature"},
		{"stripe garbage", "stripe", stripeSecret, one(webhook.HeaderStripeSignature, "garbage"), "bad format"},
		{"standard too many", "standard_webhooks", stdSecret, std("msg_1", tss, manyStd), "too many signatures"},
		{"standard huge", "standard_webhooks", stdSecret, std("msg_1", tss, goodStd+" "+huge), "too large"},
		{"standard huge id", "standard_webhooks", stdSecret, std(huge, tss, goodStd), "too large"},
		{"standard missing ts", "standard_webhooks", stdSecret, std("msg_1", "", goodStd), "missing header"},
		{"standard missing sig", "standard_webhooks", stdSecret, std("msg_1", tss, ""), "missing header"},
		{"standard spaces only", "standard_webhooks", stdSecret, std("msg_1", tss, "   "), "no signature with a supported scheme"},
		{"standard ts with space", "standard_webhooks", stdSecret, std("msg_1", " "+tss, goodStd), "bad format"},
		{"standard ts float", "standard_webhooks", stdSecret, std("msg_1", tss+".0", goodStd), "bad format"},
		{"standard b64 garbage", "standard_webhooks", stdSecret, std("msg_1", tss, "v1,!!!!"), "no signature with a supported scheme"},
		{"standard other secret", "standard_webhooks", "whsec_" + "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", std("msg_1", tss, goodStd), "no matching signature"},
		{"standard other id", "standard_webhooks", stdSecret, std("msg_2", tss, goodStd), "no matching signature"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := newVerifier(tc.verifier, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			got, err := v.Verify(tc.h, body, t0)
			if !errors.Is(err, webhook.ErrVerification) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Verify = %+v, %v; want ErrVerification: %s", got, err, tc.reason)
			}
			if got != (webhook.Verified{}) {
				t.Fatalf("failed Verify returned %+v", got)
			}
		})
	}
}

// TestStripeMultipleHeaderValues: a Stripe-Signature split over two header
// lines is one comma-separated list (RFC 9110 field combination).
func TestStripeMultipleHeaderValues(t *testing.T) {
	body := []byte(`{}`)
	sig := webhook.SignStripe(stripeSecret, t0.Unix(), body)
	tPart, v1Part, _ := strings.Cut(sig, ",")
	st, _ := webhook.NewStripe(stripeSecret)
	v, err := st.Verify(http.Header{webhook.HeaderStripeSignature: {tPart, v1Part}}, body, t0)
	if err != nil || !strings.HasPrefix(v.MessageID, "sig:") {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
}

// TestStandardSvixPrecedence: webhook-* headers win over svix-* when both
// are present.
func TestStandardSvixPrecedence(t *testing.T) {
	body := []byte(`{}`)
	h, _ := webhook.StandardHeaders(stdSecret, "msg_w", t0.Unix(), body)
	h.Set("svix-id", "msg_s")
	h.Set("svix-timestamp", "1")
	h.Set("svix-signature", "v1,AAAA")
	sw, _ := webhook.NewStandard(stdSecret)
	if v, err := sw.Verify(h, body, t0); err != nil || v.MessageID != "msg_w" {
		t.Fatalf("Verify = %+v, %v", v, err)
	}
}

func TestVerifierErrors(t *testing.T) {
	cases := []struct {
		name, secret string
		want         error
	}{
		{"bitbucket", "zz-s3cret", webhook.ErrUnknownVerifier},
		{"", "zz-s3cret", webhook.ErrUnknownVerifier},
		{"github", "", webhook.ErrInvalidSecret},
		{"stripe", "", webhook.ErrInvalidSecret},
		{"standard_webhooks", "", webhook.ErrInvalidSecret},
		{"standard_webhooks", "whsec_", webhook.ErrInvalidSecret},
		{"standard_webhooks", "whsec_not*base64!", webhook.ErrInvalidSecret},
	}
	for _, tc := range cases {
		v, err := newVerifier(tc.name, tc.secret)
		if !errors.Is(err, tc.want) || v != nil {
			t.Errorf("verifier %q with secret %q = %v, %v; want %v", tc.name, tc.secret, v, err, tc.want)
		}
		if tc.secret != "" && strings.Contains(fmt.Sprint(err), tc.secret) {
			t.Errorf("error %q leaks the secret", err)
		}
	}
	// Padded and unpadded base64 are accepted.
	if _, err := webhook.NewStandard("whsec_YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eQ=="); err != nil { // 25 bytes
		t.Fatal(err)
	}
	if _, err := webhook.NewStandard("whsec_YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eQ"); err != nil { // 25 bytes, unpadded
		t.Fatal(err)
	}
	// A key shorter than 24 bytes can be guessed: refused, naming the
	// length, never the key.
	for _, short := range []string{"whsec_YWJj", "whsec_YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnc="} { // 3 and 23 bytes
		if _, err := webhook.NewStandard(short); !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), "at least 24 bytes") {
			t.Errorf("NewStandard(%q): %v", short, err)
		}
	}
	if _, err := webhook.NewStandard("whsec_YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4"); err != nil { // exactly 24
		t.Fatal(err)
	}
}

// originals are the three presets NewGitHub, NewStripe and NewStandard
// build.
var originals = []string{webhook.PresetGitHub, webhook.PresetStripe, webhook.PresetStandard}

// newVerifier is the verifier of preset name with secret (nil on an
// error, not a typed nil).
func newVerifier(name, secret string) (webhook.Verifier, error) {
	s, err := webhook.Preset(name)
	if err != nil {
		return nil, err
	}
	v, err := webhook.NewSchemeVerifier(s, secret)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// TestVerifierRedaction: printing or marshalling a verifier never shows its
// secret.
func TestVerifierRedaction(t *testing.T) {
	secrets := map[string]string{"github": "gh-s3cret-value", "stripe": "whsec_stripe_s3cret", "standard_webhooks": "whsec_c2VjcmV0LXN0YW5kYXJkLWtleS0yNC1ieXRlcw=="}
	for name, secret := range secrets {
		v, err := newVerifier(name, secret)
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(v)
		out := fmt.Sprintf("%v %+v %#v %s %q %x", v, v, v, v, v, v) + string(j)
		for _, leak := range []string{secret, strings.TrimPrefix(secret, "whsec_"), "secret-standard", fmt.Sprintf("%v", []byte(secret))} {
			if strings.Contains(out, leak) {
				t.Errorf("%s: output leaks the secret: %s", name, out)
			}
		}
		if string(j) != `"`+name+`"` {
			t.Errorf("%s: json = %s", name, j)
		}
		if v.Name() != name {
			t.Errorf("Name = %q; want %q", v.Name(), name)
		}
	}
}

func TestVerifiedReplay(t *testing.T) {
	long := strings.Repeat("m", 300)
	cases := []struct {
		v      webhook.Verified
		key    string
		ok     bool
		retain int64
	}{
		{webhook.Verified{MessageID: "a", Timestamp: 10, Tolerance: 300 * time.Second}, "a/10", true, 310},
		{webhook.Verified{MessageID: "a", Timestamp: 10, Tolerance: 1500 * time.Millisecond}, "a/10", true, 12},
		{webhook.Verified{MessageID: "a"}, "", false, 0},
		{webhook.Verified{Timestamp: 10}, "", false, 10},
		{webhook.Verified{MessageID: long, Timestamp: 10}, webhook.NormalizeKey(long + "/10"), true, 10},
		{webhook.Verified{MessageID: "a", Timestamp: math.MaxInt64, Tolerance: time.Minute}, "a/" + strconv.FormatInt(math.MaxInt64, 10), true, math.MaxInt64},
	}
	for i, tc := range cases {
		key, ok := tc.v.ReplayKey()
		if key != tc.key || ok != tc.ok || tc.v.RetainUntil() != tc.retain {
			t.Errorf("%d: ReplayKey = %q, %v, RetainUntil = %d; want %q, %v, %d", i, key, ok, tc.v.RetainUntil(), tc.key, tc.ok, tc.retain)
		}
	}
	if k, _ := cases[4].v.ReplayKey(); !strings.HasPrefix(k, "sha256:") || len(k) != 71 {
		t.Errorf("long replay key not hashed: %q", k)
	}
}

// TestFixedNowOnly: verification depends on now only through the
// tolerance; a far-future now fails every timestamped scheme, never GitHub.
func TestFixedNowOnly(t *testing.T) {
	body := []byte("x")
	gh, _ := webhook.NewGitHub(ghSecret)
	h := http.Header{}
	h.Set(webhook.HeaderGitHubSignature, webhook.SignGitHub(ghSecret, body))
	for _, now := range []time.Time{{}, time.Unix(0, 0), time.Unix(math.MaxInt64/2, 0), time.Unix(math.MinInt64/2, 0)} {
		if _, err := gh.Verify(h, body, now); err != nil {
			t.Fatalf("github at %v: %v", now, err)
		}
	}
	st, _ := webhook.NewStripe(stripeSecret)
	h = http.Header{}
	h.Set(webhook.HeaderStripeSignature, webhook.SignStripe(stripeSecret, 100, body))
	for _, now := range []time.Time{time.Unix(math.MaxInt64, 0), time.Unix(math.MinInt64, 0), {}} {
		if _, err := st.Verify(h, body, now); !errors.Is(err, webhook.ErrVerification) {
			t.Fatalf("stripe at %v: %v", now, err)
		}
	}
	if _, err := st.Verify(h, body, time.Unix(100, 0)); err != nil {
		t.Fatal(err)
	}
}
