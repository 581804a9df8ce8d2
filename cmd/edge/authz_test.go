package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/testkit"
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

// TestNATSAuthzLoads: the printed block, as it is, is a nats-server
// configuration: the server reads the user's password from the
// environment variable the block names, and enforces the role — acme's
// service may publish on acme's scoped subjects, not on globex's.
func TestNATSAuthzLoads(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runNATSAuthz([]string{"--user", "acme-svc", "--role", "service", "--tenants", "acme"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	const password = "acme-svc-password-0123456789"
	t.Setenv("ACME_SVC_PASSWORD", password)
	srv := testkit.ConfServer(t, "listen: \"127.0.0.1:-1\"\n"+out.String())
	nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo("acme-svc", password), nats.CustomInboxPrefix("_INBOX.acme-svc"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatalf("connect with the password from ACME_SVC_PASSWORD: %v", err)
	}
	defer nc.Close()
	for subj, allowed := range map[string]bool{"sluice.v1.t.acme.hit": true, "sluice.v1.t.globex.hit": false} {
		if err := nc.Publish(subj, nil); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		err := nc.LastError()
		refused := errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subj+`"`)
		if refused == allowed {
			t.Errorf("publish %s: refused %v, want %v", subj, refused, !allowed)
		}
	}
}
