package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestNATSAuthzPrints: `edge nats-authz` prints the authorization block of
// a role for its tenants; bad input is exit 2 with a reason.
func TestNATSAuthzPrints(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runNATSAuthz([]string{"--user", "acme-svc", "--role", "service", "--tenants", "acme,globex"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, s := range []string{`password: $ACME_SVC_PASSWORD`, `"sluice.v1.t.acme.>"`, `"sluice.v1.t.globex.>"`, `subscribe: { allow: ["_INBOX.acme-svc.>"] }`} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %s:\n%s", s, out.String())
		}
	}
	for _, args := range [][]string{
		{"--user", "x", "--role", "service"},
		{"--user", "x", "--role", "root"},
		{"--user", "x", "--role", "consumer", "--tenants", "bad/name"},
	} {
		errb.Reset()
		if code := runNATSAuthz(args, &out, &errb); code != 2 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
