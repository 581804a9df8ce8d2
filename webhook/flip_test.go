package webhook_test

import (
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

// TestOneByteFlipRejected takes a valid request of every preset and of the
// custom schemes (each type, format, encoding and algorithm) and flips one
// byte, the first and then the last, of every signature (the decoded MAC,
// re-encoded as the scheme sends it) or of the token or password: each
// must fail as "no matching signature" — a well-formed credential that
// does not match. A comparison that skips a MAC's first or last byte
// passes every other test.
func TestOneByteFlipRejected(t *testing.T) {
	type flipCase struct {
		name      string
		s         webhook.Scheme // resolved: the preset's fields are set
		secret    string
		h         http.Header
		sigHeader string
		body      string
		now       time.Time
	}
	var cases []flipCase
	for _, pc := range presetCases(t) {
		cases = append(cases, flipCase{pc.name, pc.scheme, pc.secret, pc.h, pc.sigHeader, pc.body, time.Unix(pc.now, 0)})
	}
	// Standard Webhooks under its own header names (presetCases sends
	// Svix's, its fallback).
	stdSig, err := webhook.SignStandard(stdSecret, "m1", t0.Unix(), []byte(customBody))
	if err != nil {
		t.Fatal(err)
	}
	cases = append(cases, flipCase{
		"standard_webhooks", mustPreset(t, webhook.PresetStandard), stdSecret,
		hdr(webhook.HeaderStandardID, "m1", webhook.HeaderStandardTimestamp, "1700000000", webhook.HeaderStandardSignature, stdSig),
		webhook.HeaderStandardSignature, customBody, t0,
	})
	for _, cc := range customCases() {
		header := cc.s.Header
		if cc.s.Type == webhook.SchemeBasic {
			header = "Authorization"
		}
		cases = append(cases, flipCase{"custom " + cc.name, cc.s, cc.secret, cc.h, header, customBody, t0})
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		seen[tc.s.Name] = true
		t.Run(tc.name, func(t *testing.T) {
			v, err := webhook.NewSchemeVerifier(tc.s, tc.secret)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := v.Verify(tc.h, []byte(tc.body), tc.now); err != nil {
				t.Fatalf("the valid request: %v", err)
			}
			for _, at := range []int{0, -1} {
				h := tc.h.Clone()
				orig := h.Values(tc.sigHeader)
				if len(orig) == 0 {
					t.Fatalf("no %s header", tc.sigHeader)
				}
				flipped := make([]string, len(orig))
				for i, val := range orig {
					flipped[i] = flipCredential(t, tc.s, val, at)
				}
				h[http.CanonicalHeaderKey(tc.sigHeader)] = flipped
				got, err := v.Verify(h, []byte(tc.body), tc.now)
				reasonIs(t, "byte "+map[int]string{0: "first", -1: "last"}[at]+" flipped ("+strings.Join(flipped, " | ")+")", got, err, "no matching signature")
			}
		})
	}
	for _, p := range webhook.Presets() {
		if !seen[p] {
			t.Errorf("preset %s has no case", p)
		}
	}
}

// flipCredential returns the header value val with byte at (negative:
// from the end) of every signature, token or password in it flipped, the
// rest kept as sent.
func flipCredential(t *testing.T, s webhook.Scheme, val string, at int) string {
	t.Helper()
	flip := func(b []byte) []byte {
		b = slices.Clone(b)
		i := at
		if i < 0 {
			i += len(b)
		}
		b[i] ^= 0x01
		return b
	}
	switch s.Type {
	case webhook.SchemeToken:
		tok, ok := strings.CutPrefix(val, s.Prefix)
		if !ok {
			t.Fatalf("token %q lacks prefix %q", val, s.Prefix)
		}
		return s.Prefix + string(flip([]byte(tok)))
	case webhook.SchemeBasic:
		cred, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(val, "Basic "))
		if err != nil {
			t.Fatal(err)
		}
		return "Basic " + base64.StdEncoding.EncodeToString(flip(cred))
	}
	sig := func(enc string) string {
		var (
			b   []byte
			err error
		)
		if s.Encoding == webhook.EncodingHex {
			if b, err = hex.DecodeString(enc); err == nil {
				return hex.EncodeToString(flip(b))
			}
		} else if b, err = base64.StdEncoding.DecodeString(enc); err == nil {
			return base64.StdEncoding.EncodeToString(flip(b))
		}
		t.Fatalf("signature %q: %v", enc, err)
		return ""
	}
	n := 0
	var out string
	switch s.Format {
	case webhook.FormatSingle:
		enc, ok := strings.CutPrefix(val, s.Prefix)
		if !ok {
			t.Fatalf("signature %q lacks prefix %q", val, s.Prefix)
		}
		out, n = s.Prefix+sig(enc), 1
	case webhook.FormatList:
		entries := strings.Split(val, s.Separator)
		for i, e := range entries {
			lead := e[:len(e)-len(strings.TrimLeft(e, " "))]
			if enc, ok := strings.CutPrefix(strings.TrimSpace(e), s.Prefix); ok && strings.TrimSpace(e) != "" {
				entries[i], n = lead+s.Prefix+sig(enc), n+1
			}
		}
		out = strings.Join(entries, s.Separator)
	case webhook.FormatKV:
		items := strings.Split(val, ",")
		for i, it := range items {
			lead := it[:len(it)-len(strings.TrimLeft(it, " "))]
			if k, enc, _ := strings.Cut(strings.TrimSpace(it), "="); k == s.SignatureKey {
				items[i], n = lead+k+"="+sig(enc), n+1
			}
		}
		out = strings.Join(items, ",")
	default:
		t.Fatalf("format %q", s.Format)
	}
	if n == 0 {
		t.Fatalf("no signature in %q", val)
	}
	return out
}
