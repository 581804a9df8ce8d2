package webhook_test

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"
	neturl "net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

// checkVerifyResult asserts the fuzz invariants of one Verify call: a
// failure wraps ErrVerification and returns the zero Verified; a success
// implies the header carried the correct signature (which random input can
// only contain by copying the seed's).
func checkVerifyResult(t *testing.T, v webhook.Verified, err error, correct func(webhook.Verified) bool) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, webhook.ErrVerification) {
			t.Fatalf("error %v does not wrap ErrVerification", err)
		}
		if v != (webhook.Verified{}) {
			t.Fatalf("failure returned %+v", v)
		}
		return
	}
	if !correct(v) {
		t.Fatalf("verified without the correct signature: %+v", v)
	}
}

func stripeCorrect(header string, body []byte) func(webhook.Verified) bool {
	return func(v webhook.Verified) bool {
		want := webhook.SignStripe(stripeSecret, v.Timestamp, body)
		_, hexSig, _ := strings.Cut(want, ",v1=")
		return strings.Contains(strings.ToLower(header), "v1="+hexSig) && v.Tolerance == webhook.DefaultTolerance
	}
}

func standardCorrect(id, sigs string, body []byte) func(webhook.Verified) bool {
	return func(v webhook.Verified) bool {
		want, _ := webhook.SignStandard(stdSecret, id, v.Timestamp, body)
		return v.MessageID == id && strings.Contains(sigs, want)
	}
}

func FuzzStripeSignatureHeader(f *testing.F) {
	body := []byte(`{"id":"evt_1"}`)
	f.Add(webhook.SignStripe(stripeSecret, t0.Unix(), body), body, int64(0))
	f.Add("t=1700000000,v1=00,v0=11,v1="+strings.Repeat("ab", 32), body, int64(299))
	f.Add("t=1700000000,,=,t", []byte(nil), int64(-301))
	f.Add(strings.Repeat("v1=,", 70)+"t=1", []byte("x"), int64(1<<40))
	st, _ := webhook.NewStripe(stripeSecret)
	f.Fuzz(func(t *testing.T, header string, body []byte, skew int64) {
		h := http.Header{}
		h.Set(webhook.HeaderStripeSignature, header)
		v, err := st.Verify(h, body, t0.Add(time.Duration(skew)*time.Second))
		checkVerifyResult(t, v, err, stripeCorrect(header, body))
	})
}

func FuzzStandardSignatureHeader(f *testing.F) {
	body := []byte(`{"test": 2432232314}`)
	good, _ := webhook.SignStandard(stdSecret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
	f.Add("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", good, body, int64(1614265330))
	f.Add("msg_1", "1614265330", "v1a,xyz v1,"+good[3:]+"  v2,", body, int64(1614265630))
	f.Add("", "", "", []byte(nil), int64(0))
	f.Add("a.b", "00001614265330", strings.Repeat("v1,AAAA ", 65), []byte("{}"), int64(-1))
	sw, _ := webhook.NewStandard(stdSecret)
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte, now int64) {
		h := http.Header{}
		h.Set(webhook.HeaderStandardID, id)
		h.Set(webhook.HeaderStandardTimestamp, ts)
		h.Set(webhook.HeaderStandardSignature, sigs)
		v, err := sw.Verify(h, body, time.Unix(now, 0))
		checkVerifyResult(t, v, err, standardCorrect(id, sigs, body))
		if err == nil {
			if key, ok := v.ReplayKey(); !ok || len(key) > 256 {
				t.Fatalf("ReplayKey = %q, %v", key, ok)
			}
		}
	})
}

func FuzzVerifyGitHub(f *testing.F) {
	body := []byte("Hello, World!")
	f.Add(webhook.SignGitHub(ghSecret, body), body)
	f.Add("sha256=", []byte(nil))
	f.Add("sha256="+strings.Repeat("0", 64), []byte("x"))
	gh, _ := webhook.NewGitHub(ghSecret)
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		h := http.Header{}
		h.Set(webhook.HeaderGitHubSignature, sig)
		v, err := gh.Verify(h, body, t0)
		checkVerifyResult(t, v, err, func(webhook.Verified) bool {
			return strings.EqualFold(sig, webhook.SignGitHub(ghSecret, body))
		})
	})
}

// parseHeaderBlock parses "Name: value" lines (fuzz input) into a header.
func parseHeaderBlock(raw string) http.Header {
	h := http.Header{}
	sc := bufio.NewScanner(strings.NewReader(raw))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			h[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k))] = append(h[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k))], strings.TrimSpace(v))
		}
	}
	return h
}

// FuzzVerify feeds arbitrary header blocks to every verifier: never a panic,
// never a success without the correct signature.
func FuzzVerify(f *testing.F) {
	body := []byte(`{"id":"evt_1"}`)
	ts := t0.Unix()
	sw, _ := webhook.SignStandard(stdSecret, "m1", ts, body)
	f.Add(uint8(0), "X-Hub-Signature-256: "+webhook.SignGitHub(ghSecret, body)+"\nX-GitHub-Delivery: d", body)
	f.Add(uint8(1), "Stripe-Signature: "+webhook.SignStripe(stripeSecret, ts, body), body)
	f.Add(uint8(1), "Stripe-Signature: t="+strconv.FormatInt(ts, 10)+"\nStripe-Signature: v1=00", body)
	f.Add(uint8(2), "webhook-id: m1\nwebhook-timestamp: "+strconv.FormatInt(ts, 10)+"\nwebhook-signature: "+sw, body)
	f.Add(uint8(2), "svix-id: m1\nsvix-timestamp: "+strconv.FormatInt(ts, 10)+"\nsvix-signature: "+sw+"\nsvix-signature: v1,AAAA", body)
	secrets := []string{ghSecret, stripeSecret, stdSecret}
	f.Fuzz(func(t *testing.T, which uint8, raw string, body []byte) {
		i := int(which) % 3
		name := originals[i]
		v, err := newVerifier(name, secrets[i])
		if err != nil {
			t.Fatal(err)
		}
		h := parseHeaderBlock(raw)
		got, err := v.Verify(h, body, t0)
		all := strings.Join(h.Values(webhook.HeaderStripeSignature), ",")
		checkVerifyResult(t, got, err, func(got webhook.Verified) bool {
			switch name {
			case webhook.PresetGitHub:
				return strings.EqualFold(h.Get(webhook.HeaderGitHubSignature), webhook.SignGitHub(ghSecret, body))
			case webhook.PresetStripe:
				return stripeCorrect(all, body)(got)
			default:
				id := h.Get(webhook.HeaderStandardID)
				sigs := strings.Join(h.Values(webhook.HeaderStandardSignature), " ")
				if len(h.Values(webhook.HeaderStandardSignature)) == 0 {
					id = h.Get(webhook.HeaderSvixID)
					sigs = strings.Join(h.Values(webhook.HeaderSvixSignature), " ")
				}
				return standardCorrect(id, sigs, body)(got)
			}
		})
	})
}

// refLookup is an independent oracle for json:<path>: decode the whole body
// with UseNumber and walk it.
func refLookup(body []byte, path []string) (string, bool) {
	if !json.Valid(body) { // also rejects trailing data
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return "", false
	}
	for _, seg := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[seg]; !ok {
				return "", false
			}
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) || strconv.Itoa(i) != seg {
				return "", false
			}
			v = x[i]
		default:
			return "", false
		}
	}
	switch x := v.(type) {
	case string:
		return x, x != ""
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			return "", false
		}
		if strings.TrimLeft(string(x), "-") == "0" {
			return "0", true
		}
		return string(x), true
	}
	return "", false
}

func FuzzJSONPath(f *testing.F) {
	f.Add("id", []byte(`{"id":"evt_1"}`))
	f.Add("a.b.1", []byte(`{"a":{"b":[0,123456789012345678901234567890]}}`))
	f.Add("a", []byte(`{"a":-0}`))
	f.Add("a", []byte(`{"a":1e5,"a":2}`))
	f.Add("x.0", []byte(`{"x":["\u0000\ud800"]}`))
	f.Add("a", []byte(`{"a":"x"} {}`))
	f.Add("0", []byte(` [ "z" ] `))
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		d, err := webhook.ParseDedupe("json:" + path)
		if err != nil {
			if !errors.Is(err, webhook.ErrInvalidDedupe) {
				t.Fatalf("error %v does not wrap ErrInvalidDedupe", err)
			}
			return
		}
		key, ok := d.Key(nil, body)
		want, wantOK := refLookup(body, strings.Split(path, "."))
		if wantOK {
			want = webhook.NormalizeKey(want)
		}
		if ok != wantOK || key != want {
			t.Fatalf("json:%s on %q: Key = %q, %v; oracle %q, %v", path, body, key, ok, want, wantOK)
		}
	})
}

func FuzzDedupe(f *testing.F) {
	f.Add("auto", "Idempotency-Key", "k1", []byte(nil))
	f.Add("header:X-Event-Id", "X-Event-Id", strings.Repeat("v", 300), []byte(nil))
	f.Add("stripe", "", "", []byte(`{"id":12}`))
	f.Add("json:a.0", "", "", []byte(`{"a":["x"]}`))
	f.Add("header:", "X", "y", []byte(nil))
	f.Fuzz(func(t *testing.T, spec, name, value string, body []byte) {
		d, err := webhook.ParseDedupe(spec)
		if err != nil {
			if !errors.Is(err, webhook.ErrInvalidDedupe) {
				t.Fatalf("error %v does not wrap ErrInvalidDedupe", err)
			}
			return
		}
		h := http.Header{}
		h.Set(name, value)
		key, ok := d.Key(h, body)
		if ok && (key == "" || len(key) > webhook.MaxKeyBytes) {
			t.Fatalf("bad key %q", key)
		}
		if !ok && key != "" {
			t.Fatalf("no key but %q", key)
		}
		// The canonical spec parses to the same behaviour.
		d2, err := webhook.ParseDedupe(d.String())
		if err != nil {
			t.Fatalf("canonical spec %q: %v", d.String(), err)
		}
		if k2, ok2 := d2.Key(h, body); k2 != key || ok2 != ok {
			t.Fatalf("canonical spec %q: %q, %v; want %q, %v", d.String(), k2, ok2, key, ok)
		}
	})
}

// fuzzPreset is one preset under FuzzSchemeVerify with an independent
// oracle: did the request carry the correct credential for secret?
type fuzzPreset struct {
	scheme  webhook.Scheme
	secret  string
	other   string // a verifier with this secret must never accept
	correct func(h http.Header, body []byte, v webhook.Verified) bool
	seed    func(body []byte) string // a valid header block at t0
}

func fuzzPresets(t testing.TB) []fuzzPreset {
	const (
		key    = "fuzz-secret-0123456789abcdef"
		url    = "https://hooks.example.com/v1/hooks/acme/src"
		basic  = "user:fuzz-password-0123456789"
		tsName = "X-Slack-Request-Timestamp"
	)
	tss := strconv.FormatInt(t0.Unix(), 10)
	twilio := mustPreset(t, webhook.PresetTwilio)
	twilio.URL = url
	sortedForm := func(body []byte) (string, bool) {
		vals, err := neturl.ParseQuery(string(body))
		if err != nil {
			return "", false
		}
		var names []string
		for k := range vals {
			names = append(names, k)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, k := range names {
			vs := append([]string(nil), vals[k]...)
			sort.Strings(vs)
			for _, v := range vs {
				b.WriteString(k + v)
			}
		}
		return b.String(), true
	}
	eqOne := func(h http.Header, name, want string) bool {
		return len(h.Values(name)) == 1 && strings.EqualFold(h.Get(name), want)
	}
	return []fuzzPreset{
		{
			scheme: mustPreset(t, webhook.PresetSlack), secret: key, other: key + "x",
			correct: func(h http.Header, body []byte, v webhook.Verified) bool {
				ts := strconv.FormatInt(v.Timestamp, 10)
				return eqOne(h, "X-Slack-Signature", "v0="+hexMAC(sha256.New, key, "v0:"+ts+":"+string(body)))
			},
			seed: func(body []byte) string {
				return "X-Slack-Signature: v0=" + hexMAC(sha256.New, key, "v0:"+tss+":"+string(body)) + "\n" + tsName + ": " + tss
			},
		},
		{
			scheme: mustPreset(t, webhook.PresetShopify), secret: key, other: key + "x",
			correct: func(h http.Header, body []byte, _ webhook.Verified) bool {
				return h.Get("X-Shopify-Hmac-Sha256") == b64MAC(sha256.New, key, string(body))
			},
			seed: func(body []byte) string { return "X-Shopify-Hmac-Sha256: " + b64MAC(sha256.New, key, string(body)) },
		},
		{
			scheme: twilio, secret: key, other: key + "x",
			correct: func(h http.Header, body []byte, _ webhook.Verified) bool {
				f, ok := sortedForm(body)
				return ok && h.Get("X-Twilio-Signature") == b64MAC(sha1.New, key, url+f)
			},
			seed: func(body []byte) string {
				f, _ := sortedForm(body)
				return "X-Twilio-Signature: " + b64MAC(sha1.New, key, url+f)
			},
		},
		{
			scheme: mustPreset(t, webhook.PresetLinear), secret: key, other: key + "x",
			correct: func(h http.Header, body []byte, _ webhook.Verified) bool {
				return eqOne(h, "Linear-Signature", hexMAC(sha256.New, key, string(body)))
			},
			seed: func(body []byte) string { return "Linear-Signature: " + hexMAC(sha256.New, key, string(body)) },
		},
		{
			scheme: mustPreset(t, webhook.PresetSvix), secret: stdSecret, other: "whsec_" + base64.StdEncoding.EncodeToString([]byte("another-24-byte-key-here")),
			correct: func(h http.Header, body []byte, v webhook.Verified) bool {
				k, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(stdSecret, "whsec_"))
				want := "v1," + b64MAC(sha256.New, string(k), v.MessageID+"."+strconv.FormatInt(v.Timestamp, 10)+"."+string(body))
				return v.MessageID == h.Get("svix-id") && strings.Contains(strings.Join(h.Values("svix-signature"), " "), want)
			},
			seed: func(body []byte) string {
				sig, _ := webhook.SignStandard(stdSecret, "m1", t0.Unix(), body)
				return "svix-id: m1\nsvix-timestamp: " + tss + "\nsvix-signature: v1a,x " + sig
			},
		},
		{
			scheme: mustPreset(t, webhook.PresetGitLab), secret: key, other: key + "x",
			correct: func(h http.Header, _ []byte, _ webhook.Verified) bool { return h.Get("X-Gitlab-Token") == key },
			seed:    func([]byte) string { return "X-Gitlab-Token: " + key },
		},
		{
			scheme: mustPreset(t, webhook.PresetAPIKey), secret: key, other: key + "x",
			correct: func(h http.Header, _ []byte, _ webhook.Verified) bool { return h.Get("X-Api-Key") == key },
			seed:    func([]byte) string { return "X-API-Key: " + key },
		},
		{
			scheme: mustPreset(t, webhook.PresetBasic), secret: basic, other: basic + "x",
			correct: func(h http.Header, _ []byte, _ webhook.Verified) bool {
				scheme, cred, _ := strings.Cut(h.Get("Authorization"), " ")
				raw, err := base64.StdEncoding.DecodeString(strings.TrimLeft(cred, " "))
				return strings.EqualFold(scheme, "basic") && err == nil && string(raw) == basic
			},
			seed: func([]byte) string { return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(basic)) },
		},
	}
}

// FuzzSchemeVerify feeds arbitrary header blocks and bodies to the presets'
// header parsers: never a panic, every failure wraps ErrVerification with
// the zero Verified, a success only with the correct credential (checked by
// an independent oracle), and never a success with another secret.
func FuzzSchemeVerify(f *testing.F) {
	ps := fuzzPresets(f)
	body := []byte("From=%2B1555&Body=hi+there&From=%2B1444")
	for i, p := range ps {
		f.Add(uint8(i), p.seed(body), body, int64(0))
		f.Add(uint8(i), p.seed(body)+"\n"+strings.SplitN(p.seed(body), "\n", 2)[0], body, int64(299))
	}
	f.Add(uint8(0), "X-Slack-Signature: v0=\nX-Slack-Request-Timestamp: 1e9", []byte(nil), int64(-301))
	f.Add(uint8(4), "svix-id: a\nsvix-timestamp: 0001700000000\nsvix-signature: "+strings.Repeat("v1,AAAA ", 65), []byte("{}"), int64(1))
	f.Add(uint8(7), "Authorization: basic    !!!", []byte(nil), int64(0))
	f.Add(uint8(2), "X-Twilio-Signature: AAAA", []byte("a=%zz;b"), int64(0))
	vs := make([]*webhook.SchemeVerifier, len(ps))
	others := make([]*webhook.SchemeVerifier, len(ps))
	for i, p := range ps {
		var err error
		if vs[i], err = webhook.NewSchemeVerifier(p.scheme, p.secret); err != nil {
			f.Fatal(err)
		}
		if others[i], err = webhook.NewSchemeVerifier(p.scheme, p.other); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, raw string, body []byte, skew int64) {
		i := int(which) % len(ps)
		h := parseHeaderBlock(raw)
		now := t0.Add(time.Duration(skew%(1<<32)) * time.Second)
		got, err := vs[i].Verify(h, body, now)
		checkVerifyResult(t, got, err, func(v webhook.Verified) bool { return ps[i].correct(h, body, v) })
		got, err = others[i].Verify(h, body, now)
		if err == nil || !errors.Is(err, webhook.ErrVerification) || got != (webhook.Verified{}) {
			t.Fatalf("%s verified with another secret: %+v, %v", ps[i].scheme.Name, got, err)
		}
	})
}
