package tenants_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/config"
	"github.com/sluice-dev/sluice/httpapi"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/tenants"
	"github.com/sluice-dev/sluice/testkit"
)

func parseConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	args := []string{}
	if yaml != "" {
		args = append(args, "--config", testkit.WriteTemp(t, "edge.yaml", []byte(yaml)))
	}
	cfg, err := config.Parse(args, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func admits(p *tenants.Policy, tenant, source string) bool {
	_, err := p.Source(tenant, source)
	return !errors.Is(err, httpapi.ErrUnknownSource)
}

// TestRemovedRecordsKeepAdmissionClosed: once a tenant record has existed,
// a quickstart node refuses unknown tenants for good — after the record is
// removed, and on a registry started after the record's tombstone has
// expired (the bucket's ClosedKey marker is what remembers).
func TestRemovedRecordsKeepAdmissionClosed(t *testing.T) {
	k := testkit.New(t)
	quick := parseConfig(t, "")
	b := k.Bucket(t, tenants.BucketConfig("sluice", 1))
	reg := tenants.NewRegistry(b)
	if err := reg.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	pol := tenants.NewPolicy(quick, reg)
	mux := httpAdmin(t, reg, pol)
	if !admits(pol, "anyone", "raw") || !pol.OpenToUnknown() || !pol.KnownTenant("anyone") {
		t.Fatal("a fresh quickstart node should accept any tenant")
	}
	mustDo(t, mux, "PUT", "/v1/admin/tenants/acme", `{"sources":{"raw":{}}}`, 201)
	// KnownTenant (managed consumers' 404 unknown_tenant) follows admission.
	if !pol.KnownTenant("acme") || pol.KnownTenant("anyone") {
		t.Fatalf("with acme's record: KnownTenant(acme) %v, KnownTenant(anyone) %v, want true, false", pol.KnownTenant("acme"), pol.KnownTenant("anyone"))
	}
	mustDo(t, mux, "DELETE", "/v1/admin/tenants/acme", ``, 200)
	if admits(pol, "anyone", "raw") || admits(pol, "acme", "raw") || pol.OpenToUnknown() || pol.KnownTenant("acme") {
		t.Fatal("removing the last record reopened the node")
	}
	// Wait for the purge tombstone to expire (the bucket's marker TTL).
	subject := "$KV." + kvstore.BucketNames("sluice").Tenants + ".acme"
	testkit.Eventually(t, 10*time.Second, func() bool {
		s, err := k.JS.Stream(context.Background(), "KV_"+kvstore.BucketNames("sluice").Tenants)
		if err != nil {
			return false
		}
		_, err = s.GetLastMsgForSubject(context.Background(), subject)
		return err != nil
	}, "the tombstone expired")
	later := tenants.NewRegistry(b)
	if err := later.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(later.Stop)
	if !later.Closed() || admits(tenants.NewPolicy(quick, later), "anyone", "raw") {
		t.Fatal("a registry started after the removal reopened the node")
	}
	// The explicit choice still opens it.
	if !admits(tenants.NewPolicy(parseConfig(t, "allow_unknown: true\n"), later), "anyone", "raw") {
		t.Fatal("allow_unknown: true in the file should accept unknown tenants")
	}
}

// TestReloadWithoutTenantsKeepsClosed: a reload (SIGHUP) to a file that
// lists no tenant any more does not reopen the node; allow_unknown: true
// does, as the operator's explicit choice.
func TestReloadWithoutTenantsKeepsClosed(t *testing.T) {
	pol := tenants.NewPolicy(parseConfig(t, "tenants:\n  acme:\n    sources: {raw: {}}\n"), nil)
	if admits(pol, "other", "raw") || !admits(pol, "acme", "raw") || pol.KnownTenant("other") || !pol.KnownTenant("acme") {
		t.Fatal("a file with tenants admits only them")
	}
	pol.Reload(parseConfig(t, ""))
	if admits(pol, "other", "raw") || admits(pol, "acme", "raw") || pol.OpenToUnknown() {
		t.Fatal("reloading a file without tenants reopened the node")
	}
	pol.Reload(parseConfig(t, "allow_unknown: true\n"))
	if !admits(pol, "other", "raw") || !pol.KnownTenant("other") {
		t.Fatal("allow_unknown: true should open the node")
	}
}

// httpAdmin serves the admin routes of reg and pol; it returns the base URL.
func httpAdmin(t *testing.T, reg *tenants.Registry, pol *tenants.Policy) string {
	t.Helper()
	mux := http.NewServeMux()
	admin, err := tenants.NewAdmin(reg, pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range admin.Routes() {
		mux.HandleFunc(r.Pattern, r.Handler)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}
