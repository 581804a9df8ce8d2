package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/webhook"
)

func TestParseEventType(t *testing.T) {
	h := http.Header{"X-Github-Event": {"push"}, "X-Shopify-Topic": {"orders/create"}}
	body := []byte(`{"type":"invoice.paid","data":{"n":7}}`)
	for _, c := range []struct{ spec, want string }{
		{"github", "push"},
		{"shopify", "orders/create"},
		{"stripe", "invoice.paid"},
		{"header:x-github-event", "push"},
		{"json:data.n", "7"},
		{"json:missing", ""},
		{"gitlab", ""},
	} {
		e, err := webhook.ParseEventType(c.spec)
		if err != nil || !e.IsSet() || e.String() != c.spec {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if got := e.Type(h, body); got != c.want {
			t.Errorf("%s: %q, want %q", c.spec, got, c.want)
		}
	}
	if e, err := webhook.ParseEventType(""); err != nil || e.IsSet() {
		t.Fatalf("empty: %v", err)
	}
	for _, spec := range []string{"header:", "header:a b", "json:", "json:a..b", "bogus", "json:" + strings.Repeat("a.", 40) + "a"} {
		if _, err := webhook.ParseEventType(spec); !errors.Is(err, webhook.ErrInvalidEventType) {
			t.Errorf("%q: %v", spec, err)
		}
	}
	e, _ := webhook.ParseEventType("header:X-Type")
	long := strings.Repeat("x", webhook.MaxEventTypeBytes+1)
	if got := e.Type(http.Header{"X-Type": {long}}, nil); !strings.HasPrefix(got, "sha256:") || len(got) != 7+32 {
		t.Fatalf("long type: %q", got)
	}
	if got := e.Type(http.Header{"X-Type": {long[1:]}}, nil); got != long[1:] {
		t.Fatalf("type at the bound: %q", got)
	}
}
