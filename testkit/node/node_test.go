package node_test

import (
	"net/http"
	"testing"

	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/node"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// Flags given to Start reach the node: with an admin token the admin API
// answers 401 without it and 404 for an unknown tenant's override with it.
func TestStartPassesFlags(t *testing.T) {
	n := node.Start(t, testkit.New(t), "--admin-token", "0123456789abcdef0123456789abcdef")
	if n.Config.AdminToken.Reveal() != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("admin token not applied")
	}
	limits := n.URL + "/v1/admin/tenants/acme/limits"
	if r := testkit.HTTP(t, http.MethodGet, limits, nil, nil); r.Code != http.StatusUnauthorized {
		t.Fatalf("admin without token: %d, want 401", r.Code)
	}
	if r := testkit.HTTP(t, http.MethodGet, limits, nil, map[string]string{"Authorization": "Bearer 0123456789abcdef0123456789abcdef"}); r.Code != http.StatusOK {
		t.Fatalf("admin with token: %d, want 200", r.Code)
	}
}

// Two nodes in one test, each on its own kit, do not see each other.
func TestNodesAreIndependent(t *testing.T) {
	a := node.Start(t, testkit.New(t))
	b := node.Start(t, testkit.New(t))
	if a.URL == b.URL {
		t.Fatalf("both nodes on %s", a.URL)
	}
	resp, err := http.Post(a.URL+"/v1/hooks/acme/gh", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("node a: %d", resp.StatusCode)
	}
	info, err := b.Kit.JS.Stream(testkit.Context(t), b.Config.HooksStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("node b's HOOKS holds %d hooks, want 0", n)
	}
}
