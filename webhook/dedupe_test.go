package webhook_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/webhook"
)

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestDedupeKey(t *testing.T) {
	long := strings.Repeat("k", 201)
	sum := sha256.Sum256([]byte(long))
	longKey := "sha256:" + hex.EncodeToString(sum[:])
	exact := strings.Repeat("k", 200)

	cases := []struct {
		spec string
		h    http.Header
		body string
		key  string // "" = no key
	}{
		// presets
		{"github", hdr("X-GitHub-Delivery", "d1"), "", "d1"},
		{"github", hdr("x-github-delivery", "d1"), "", "d1"},
		{"github", hdr("webhook-id", "w1"), "", ""},
		{"standard_webhooks", hdr("webhook-id", "w1", "X-GitHub-Delivery", "d1"), "", "w1"},
		{"svix", hdr("svix-id", "s1"), "", "s1"},
		// standard_webhooks and svix dedupe on the id of the signed family,
		// whichever header names the sender uses.
		{"standard_webhooks", hdr("svix-id", "s1", "svix-signature", "v1,x"), "", "s1"},
		{"standard_webhooks", hdr("webhook-id", "w1", "svix-id", "s1", "svix-signature", "v1,x"), "", "s1"},
		{"standard_webhooks", hdr("webhook-id", "w1", "webhook-signature", "v1,x", "svix-id", "s1", "svix-signature", "v1,y"), "", "w1"},
		{"svix", hdr("webhook-id", "w1", "webhook-signature", "v1,x"), "", "w1"},
		{"svix", hdr("svix-id", "s1", "svix-signature", "v1,x"), "", "s1"},
		{"standard_webhooks", hdr("svix-id", "s1"), "", ""},
		{"shopify", hdr("X-Shopify-Webhook-Id", "sh1"), "", "sh1"},
		{"stripe", nil, `{"id":"evt_1","data":{"id":"other"}}`, "evt_1"},
		{"stripe", hdr("Idempotency-Key", "i1"), `{"object":"event"}`, ""},
		{"stripe", nil, `not json`, ""},
		// header:
		{"header:X-Event-Id", hdr("X-Event-Id", "e1"), "", "e1"},
		{"header:x-event-id", hdr("X-EVENT-ID", "e1"), "", "e1"},
		{"header:X-Event-Id", hdr("X-Event-Id", ""), "", ""},
		{"header:X-Event-Id", hdr("X-Event-Id", "first", "X-Event-Id", "second"), "", "first"},
		{"header:X-Event-Id", hdr("X-Event-Id", long), "", longKey},
		{"header:X-Event-Id", hdr("X-Event-Id", exact), "", exact},
		// json:
		{"json:data.object.id", nil, `{"data":{"object":{"id":"obj_1"}}}`, "obj_1"},
		{"json:event_id", nil, `{"event_id":42}`, "42"},
		{"json:event_id", nil, `{"event_id":-7}`, "-7"},
		{"json:event_id", nil, `{"event_id":-0}`, "0"},
		{"json:event_id", nil, `{"event_id":0}`, "0"},
		{"json:event_id", nil, `{"event_id":123456789012345678901234567890}`, "123456789012345678901234567890"},
		{"json:event_id", nil, `{"event_id":9007199254740993}`, "9007199254740993"},
		{"json:event_id", nil, `{"event_id":1.5}`, ""},
		{"json:event_id", nil, `{"event_id":1e3}`, ""},
		{"json:event_id", nil, `{"event_id":1.0}`, ""},
		{"json:event_id", nil, `{"event_id":true}`, ""},
		{"json:event_id", nil, `{"event_id":null}`, ""},
		{"json:event_id", nil, `{"event_id":{"a":1}}`, ""},
		{"json:event_id", nil, `{"event_id":[1]}`, ""},
		{"json:event_id", nil, `{"event_id":""}`, ""},
		{"json:event_id", nil, `{"event_id":"x","event_id":"y"}`, "y"},
		{"json:event_id", nil, `{"EVENT_ID":"x"}`, ""},
		{"json:event_id", nil, `{"event_id":"x"} trailing`, ""},
		{"json:event_id", nil, `{"event_id":"x"`, ""},
		{"json:event_id", nil, ``, ""},
		{"json:event_id", nil, `"event_id"`, ""},
		{"json:event_id", nil, `  {"event_id" : "sp"}  `, "sp"},
		{"json:event_id", nil, `{"event_id":"\u00e9\n"}`, "é\n"},
		{"json:event_id", nil, `{"event_id":"` + long + `"}`, longKey},
		{"json:items.1.id", nil, `{"items":[{"id":"a"},{"id":"b"}]}`, "b"},
		{"json:items.2.id", nil, `{"items":[{"id":"a"},{"id":"b"}]}`, ""},
		{"json:items.01.id", nil, `{"items":[{"id":"a"},{"id":"b"}]}`, ""},
		{"json:0", nil, `["zero"]`, "zero"},
		{"json:a.b", nil, `{"a":"str"}`, ""},
		{"json:1", nil, `{"1":"one"}`, "one"},
		// none, auto
		{"none", hdr("Idempotency-Key", "i1", "webhook-id", "w1"), `{"id":"x"}`, ""},
		{"auto", hdr("Idempotency-Key", "i1", "webhook-id", "w1"), "", "i1"},
		{"auto", hdr("webhook-id", "w1", "X-GitHub-Delivery", "d1"), "", "w1"},
		{"auto", hdr("X-GitHub-Delivery", "d1", "svix-id", "s1"), "", "d1"},
		{"auto", hdr("svix-id", "s1", "X-Shopify-Webhook-Id", "sh1"), "", "s1"},
		{"auto", hdr("X-Shopify-Webhook-Id", "sh1"), "", "sh1"},
		{"auto", hdr("Idempotency-Key", "", "webhook-id", "w1"), "", "w1"},
		{"auto", hdr("X-Event-Id", "e1"), `{"id":"x"}`, ""},
		{"", hdr("Idempotency-Key", "i1"), "", "i1"},
	}
	for _, tc := range cases {
		d, err := webhook.ParseDedupe(tc.spec)
		if err != nil {
			t.Fatalf("ParseDedupe(%q): %v", tc.spec, err)
		}
		key, ok := d.Key(tc.h, []byte(tc.body))
		if ok != (tc.key != "") || key != tc.key {
			t.Errorf("%s on %v %q: Key = %q, %v; want %q", tc.spec, tc.h, tc.body, key, ok, tc.key)
		}
	}
	// The zero Dedupe is auto.
	var zero webhook.Dedupe
	if k, ok := zero.Key(hdr("Idempotency-Key", "i1"), nil); !ok || k != "i1" || zero.String() != "auto" {
		t.Errorf("zero Dedupe: %q, %v, %q", k, ok, zero.String())
	}
}

// TestDedupeLookupIdempotency: only a key read from the Idempotency-Key
// header (auto, or header:Idempotency-Key in any case) is the sender's
// per-request key; provider event ids are not, nor is an Idempotency-Key
// auto passes over.
func TestDedupeLookupIdempotency(t *testing.T) {
	cases := []struct {
		spec string
		h    http.Header
		body string
		key  string
		idem bool
	}{
		{"auto", hdr("Idempotency-Key", "i1", "webhook-id", "w1"), "", "i1", true},
		{"", hdr("idempotency-key", "i1"), "", "i1", true},
		{"auto", hdr("Idempotency-Key", "", "webhook-id", "w1"), "", "w1", false},
		{"auto", hdr("X-GitHub-Delivery", "d1"), "", "d1", false},
		{"header:Idempotency-Key", hdr("Idempotency-Key", "i2"), "", "i2", true},
		{"header:idempotency-key", hdr("IDEMPOTENCY-KEY", "i2"), "", "i2", true},
		{"header:X-Event-Id", hdr("X-Event-Id", "e1", "Idempotency-Key", "i1"), "", "e1", false},
		{"github", hdr("X-GitHub-Delivery", "d1", "Idempotency-Key", "i1"), "", "d1", false},
		{"stripe", hdr("Idempotency-Key", "i1"), `{"id":"evt_1"}`, "evt_1", false},
		{"json:idempotency_key", nil, `{"idempotency_key":"j1"}`, "j1", false},
		{"none", hdr("Idempotency-Key", "i1"), "", "", false},
		{"header:Idempotency-Key", hdr("Idempotency-Key", ""), "", "", false},
	}
	for _, tc := range cases {
		d := webhook.MustParseDedupe(tc.spec)
		key, idem, ok := d.Lookup(tc.h, []byte(tc.body))
		if ok != (tc.key != "") || key != tc.key || idem != tc.idem {
			t.Errorf("%s on %v: Lookup = %q, %v, %v; want %q, idempotency %v", tc.spec, tc.h, key, idem, ok, tc.key, tc.idem)
		}
	}
}

func TestParseDedupeErrors(t *testing.T) {
	for _, spec := range []string{
		"gitlab", "Github", "header:", "header:Bad Header", "header:X:Y", "json:", "json:a..b", "json:.a", "json:a.",
		"json:" + strings.Repeat("a.", 32) + "a", "header:" + strings.Repeat("x", 600), " auto", "none ",
	} {
		d, err := webhook.ParseDedupe(spec)
		if !errors.Is(err, webhook.ErrInvalidDedupe) {
			t.Errorf("ParseDedupe(%q) = %v, %v; want ErrInvalidDedupe", spec, d, err)
			continue
		}
		name := spec
		if len(name) > 20 {
			name = name[:20]
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name spec %q", err, spec)
		}
	}
}

func TestDedupeString(t *testing.T) {
	for _, spec := range []string{"auto", "none", "github", "standard_webhooks", "svix", "shopify", "stripe", "header:X-Event-Id", "json:a.b.0"} {
		d := webhook.MustParseDedupe(spec)
		if d.String() != spec {
			t.Errorf("String = %q; want %q", d.String(), spec)
		}
		j, err := json.Marshal(d)
		if err != nil || string(j) != `"`+spec+`"` {
			t.Errorf("json = %s, %v", j, err)
		}
		if d.IsNone() != (spec == "none") {
			t.Errorf("%s: IsNone = %v", spec, d.IsNone())
		}
	}
}

func TestNormalizeKey(t *testing.T) {
	for _, n := range []int{0, 1, 199, 200} {
		k := strings.Repeat("a", n)
		if webhook.NormalizeKey(k) != k {
			t.Errorf("NormalizeKey(len %d) changed the key", n)
		}
	}
	k := strings.Repeat("a", 201)
	sum := sha256.Sum256([]byte(k))
	if got := webhook.NormalizeKey(k); got != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("NormalizeKey(len 201) = %q", got)
	}
}
