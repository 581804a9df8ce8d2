package config_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestChanges: a reload names what it changes (tenants, sources,
// defaults) and the settings that need a restart, never a secret.
func TestChanges(t *testing.T) {
	before := mustLoad(t, []string{"--config", writeFile(t, `
tenants:
  acme:
    sources:
      gh: {verify: github, secret: first-secret-value}
      raw: {}
  gone: {}
`)}, nil)
	after := mustLoad(t, []string{"--http-addr", "127.0.0.1:9999", "--config", writeFile(t, `
defaults:
  limits: {hooks: {rate: 1, burst: 1}}
tenants:
  acme:
    sources:
      gh: {verify: github, secret: second-secret-value}
      raw: {}
      new: {}
  added: {}
`)}, nil)
	applied, restart := after.Changes(before)
	got := strings.Join(applied, "; ")
	for _, want := range []string{"defaults.limits", "tenants.added added", "tenants.acme changed: [sources.gh sources.new added]", "tenants.gone removed"} {
		if !strings.Contains(got, want) {
			t.Errorf("changes %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "raw") || fmt.Sprint(restart) != "[File HTTPAddr]" {
		t.Errorf("changes %q, restart %v", got, restart)
	}
	if s := fmt.Sprintf("%+v %#v", after.Tenants, after.Tenants); strings.Contains(s, "second-secret") {
		t.Fatal("a config prints its secret")
	}
	if a, r := after.Changes(after); len(a)+len(r) != 0 {
		t.Errorf("no change: %v %v", a, r)
	}
}

// TestChangesOfSourceSettings: a custom scheme changed under the same name,
// an event type, a request policy or a handshake is a change on reload.
func TestChangesOfSourceSettings(t *testing.T) {
	const base = `
tenants:
  acme:
    sources:
      own:
        secret: 0123456789abcdef-s3cret
        verify: {name: signer, type: hmac, algorithm: hmac-sha256, header: X-Sig, format: single, encoding: hex, signed: "{body}"}
      lab: {verify: github, secret: x}
`
	before := mustLoad(t, []string{"--config", writeFile(t, base)}, nil)
	for _, c := range []struct{ from, to string }{
		{"header: X-Sig", "header: X-Other-Sig"},
		{"lab: {verify: github, secret: x}", "lab: {verify: github, secret: x, event_type: github}"},
		{"lab: {verify: github, secret: x}", "lab: {verify: github, secret: x, ip_allow: [10.0.0.0/8]}"},
		{"lab: {verify: github, secret: x}", "lab: {verify: github, secret: x, handshake: crc}"},
	} {
		after := mustLoad(t, []string{"--config", writeFile(t, strings.Replace(base, c.from, c.to, 1))}, nil)
		if applied, _ := after.Changes(before); len(applied) != 1 || !strings.Contains(applied[0], "tenants.acme changed") {
			t.Errorf("%s -> %s: changes %v", c.from, c.to, applied)
		}
	}
}
