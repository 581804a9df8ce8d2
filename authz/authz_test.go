package authz_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/authz"
	"github.com/sluice-dev/sluice/protocol"
)

func TestFor(t *testing.T) {
	p, err := authz.ForShards(authz.RoleService, "acme-svc", "sluice", "HOOKS", 1, []string{"acme", "a.b"})
	if err != nil {
		t.Fatal(err)
	}
	want := authz.Permissions{Publish: []string{"sluice.v1.t." + protocol.TenantToken("a.b") + ".>", "sluice.v1.t.acme.>"}, Subscribe: []string{"_INBOX.acme-svc.>"}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("service: %+v, want %+v", p, want)
	}
	if strings.Contains(protocol.TenantToken("a.b"), ".") {
		t.Fatalf("token %q", protocol.TenantToken("a.b"))
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
		if _, err := authz.ForShards(c.role, c.user, "sluice", "HOOKS", 1, c.tenants); !errors.Is(err, authz.ErrInvalid) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	block := authz.ConfigBlock([]authz.Entry{{User: "acme-svc", Role: authz.RoleService, Tenants: []string{"acme"}, Credential: authz.PasswordCredential("acme-svc"), Perms: p}})
	for _, s := range []string{"authorization {", `password: $ACME_SVC_PASSWORD`, `publish: { allow: ["sluice.v1.t.`, `subscribe: { allow: ["_INBOX.acme-svc.>"] }`, `nats.CustomInboxPrefix("_INBOX.acme-svc")`} {
		if !strings.Contains(block, s) {
			t.Errorf("block lacks %q:\n%s", s, block)
		}
	}
}
