package authz_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/authz"
)

func TestFor(t *testing.T) {
	p, err := authz.For(authz.RoleService, "acme-svc", "sluice", "HOOKS", []string{"acme", "a.b"})
	if err != nil {
		t.Fatal(err)
	}
	want := authz.Permissions{Publish: []string{"sluice.v1.t." + authz.TenantToken("a.b") + ".>", "sluice.v1.t.acme.>"}, Subscribe: []string{"_INBOX.acme-svc.>"}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("service: %+v, want %+v", p, want)
	}
	if strings.Contains(authz.TenantToken("a.b"), ".") {
		t.Fatalf("token %q", authz.TenantToken("a.b"))
	}
	for _, c := range []struct {
		role, user string
		tenants    []string
	}{
		{authz.RoleService, "svc", nil},
		{authz.RoleConsumer, "c", nil},
		{authz.RoleOperator, "op", []string{"acme"}},
		{"admin", "x", nil},
		{authz.RoleNode, "a.b", nil},
		{authz.RoleService, "s", []string{""}},
	} {
		if _, err := authz.For(c.role, c.user, "sluice", "HOOKS", c.tenants); !errors.Is(err, authz.ErrInvalid) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	block := authz.ConfigBlock([]authz.Entry{{User: "acme-svc", Role: authz.RoleService, Tenants: []string{"acme"}, Credential: `user: "acme-svc", password: "$ACME_SVC_PASS"`, Perms: p}})
	for _, s := range []string{"authorization {", `publish: { allow: ["sluice.v1.t.`, `subscribe: { allow: ["_INBOX.acme-svc.>"] }`, `nats.CustomInboxPrefix("_INBOX.acme-svc")`} {
		if !strings.Contains(block, s) {
			t.Errorf("block lacks %q:\n%s", s, block)
		}
	}
}

// match reports whether NATS subject pattern pat (with * and >) matches
// subject subj.
func match(pat, subj string) bool {
	p, s := strings.Split(pat, "."), strings.Split(subj, ".")
	for i, tok := range p {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s):
			return false
		case tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(p) == len(s)
}

// TestTenantsBucketIsNodeOnly: no role but node may publish to or
// subscribe on any subject of the tenants bucket (its KV subjects, its
// stream's JetStream API, direct gets).
func TestTenantsBucketIsNodeOnly(t *testing.T) {
	subjects := []string{
		"$KV.sluice_tenants.acme", "$JS.API.DIRECT.GET.KV_sluice_tenants.$KV.sluice_tenants.acme",
		"$JS.API.STREAM.MSG.GET.KV_sluice_tenants", "$JS.API.STREAM.INFO.KV_sluice_tenants",
		"$JS.API.CONSUMER.CREATE.KV_sluice_tenants", "$JS.API.CONSUMER.CREATE.KV_sluice_tenants.x.$KV.sluice_tenants.>",
	}
	for _, role := range authz.Roles() {
		var tenants []string
		if role == authz.RoleService || role == authz.RoleConsumer {
			tenants = []string{"acme"}
		}
		p, err := authz.For(role, "u", "sluice", "HOOKS", tenants)
		if err != nil {
			t.Fatal(err)
		}
		for _, subj := range subjects {
			allowed := false
			for _, pat := range append(append([]string{}, p.Publish...), p.Subscribe...) {
				allowed = allowed || match(pat, subj)
			}
			if allowed != (role == authz.RoleNode) {
				t.Errorf("role %s: %s allowed=%v", role, subj, allowed)
			}
		}
	}
	if !match("a.*.c", "a.b.c") || match("a.*", "a.b.c") || !match("a.>", "a.b.c") || match("a.>", "a") {
		t.Fatal("match")
	}
}

// TestConsumerReadsOwnRedeliveries: a consumer of acme may subscribe to
// acme's redelivery namespace, and to no other tenant's.
func TestConsumerReadsOwnRedeliveries(t *testing.T) {
	p, err := authz.For(authz.RoleConsumer, "r", "sluice", "HOOKS", []string{"acme", "a.b"})
	if err != nil {
		t.Fatal(err)
	}
	if got := authz.RedeliverPrefix("sluice", "a.b"); got != "sluice.redeliver.a=2Eb" {
		t.Fatalf("RedeliverPrefix = %q", got)
	}
	for subj, want := range map[string]bool{
		"sluice.redeliver.acme": true, "sluice.redeliver.acme.billing": true, "sluice.redeliver.a=2Eb.x.y": true,
		"sluice.redeliver.globex.x": false, "sluice.redeliver.acmex": false, "sluice.redeliver": false,
		"sluice.hooks.globex.gh": false, "sluice.v1.quota.hit": false,
	} {
		allowed := false
		for _, pat := range p.Subscribe {
			allowed = allowed || match(pat, subj)
		}
		if allowed != want {
			t.Errorf("subscribe %s: allowed %v, want %v", subj, allowed, want)
		}
	}
}
