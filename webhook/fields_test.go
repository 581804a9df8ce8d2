package webhook_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/webhook"
)

func TestSchemeFromFields(t *testing.T) {
	s, err := webhook.SchemeFromFields(map[string]string{
		"name": "acme", "type": "hmac", "header": "X-Sig", "algorithm": "hmac-sha256", "format": "single",
		"encoding": "hex", "signed": "{timestamp}.{body}", "timestamp_header": "X-Ts", "tolerance": "5m",
		"fallback.header": "X-Old-Sig", "fallback.timestamp_header": "X-Old-Ts",
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "acme" || s.Type != "hmac" || s.Tolerance != 5*time.Minute || s.Fallback == nil ||
		s.Fallback.Header != "X-Old-Sig" || s.Fallback.TimestampHeader != "X-Old-Ts" || s.Validate() != nil {
		t.Fatalf("%+v: %v", s, s.Validate())
	}
	if s, err := webhook.SchemeFromFields(map[string]string{"tolerance": "300"}); err != nil || s.Tolerance != 300*time.Second {
		t.Fatalf("seconds: %+v, %v", s, err)
	}
	for _, c := range []struct {
		fields map[string]string
		field  string
	}{
		{map[string]string{"hedaer": "X"}, "hedaer"},
		{map[string]string{"tolerance": "soon"}, "tolerance"},
		{map[string]string{"tolerance": "-1"}, "tolerance"},
		{map[string]string{"tolerance": "99999999999999999999"}, "tolerance"},
		{map[string]string{"fallback": "X"}, "fallback"},
	} {
		_, err := webhook.SchemeFromFields(c.fields)
		var fe *webhook.SchemeFieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, webhook.ErrInvalidScheme) {
			t.Errorf("%v: %v, want an error about %s", c.fields, err, c.field)
		}
	}
	many := map[string]string{}
	for i := 0; i <= webhook.MaxSchemeFields; i++ {
		many[strings.Repeat("x", i+1)] = ""
	}
	if _, err := webhook.SchemeFromFields(many); !errors.Is(err, webhook.ErrInvalidScheme) {
		t.Fatalf("too many fields: %v", err)
	}
	if _, err := webhook.SchemeFromFields(map[string]string{"header": strings.Repeat("x", webhook.MaxSchemeFieldBytes+1)}); !errors.Is(err, webhook.ErrInvalidScheme) {
		t.Fatalf("long value: %v", err)
	}
}
