// Package node runs a whole sluice node (owners, the micro service, events,
// the settler and the HTTP edge: the fx application cmd/edge runs) on a
// testkit server's in-process connection, stopped when the test ends:
//
//	n := node.Start(t, testkit.New(t))
//	c, _ := client.New(n.Kit.Conn) // or the edge at n.URL
//
// It lives apart from testkit because sluice's own package tests use
// testkit, and the node imports those packages.
package node

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.uber.org/fx"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/testkit"
)

// Node is a running sluice node.
type Node struct {
	// Kit is the server and connection the node runs on.
	Kit *testkit.Kit
	// URL is the HTTP edge's base URL, e.g. "http://127.0.0.1:40123".
	URL string
	// Config is the node's parsed configuration.
	Config *config.Config
	// Stores are the node's stores (tenant records and policy included).
	Stores *sluicefx.Stores
}

// defaults keep a test node small and quick: four partitions, a loopback
// HTTP port picked by the system. Flags given to Start come after them and
// win.
var defaults = []string{"--http-addr", "127.0.0.1:0", "--partitions", "4"}

// Start runs a node on k. args are cmd/edge flags (docs/PROTOCOL.md,
// "Configuration"), e.g. "--admin-token", "…", or "--config", "edge.yaml";
// the data directory is a fresh temporary one unless args name one. The
// node is stopped by t.Cleanup; a node that cannot start fails the test.
//
// Set SLUICE_TEST_LOG=1 to see the node's log on stderr.
func Start(t testkit.T, k *testkit.Kit, args ...string) *Node {
	t.Helper()
	return StartLogged(t, k, testkit.Log(), args...)
}

// StartLogged is Start with the node's log going to log (nil: discarded).
func StartLogged(t testkit.T, k *testkit.Kit, log *slog.Logger, args ...string) *Node {
	t.Helper()
	all := append(append([]string{"--data-dir", t.TempDir()}, defaults...), args...)
	cfg, err := config.Parse(all, nil, nil)
	if err != nil {
		t.Fatalf("node: config: %v", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var h *sluicefx.HTTP
	var st *sluicefx.Stores
	app := fx.New(
		sluicefx.Options(context.Background(), cfg, log),
		// The kit's connection replaces the one ProvideNATS would make (and
		// the embedded server it would start): the kit owns both.
		fx.Replace(&sluicefx.NATS{Conn: k.Conn, JS: k.JS}),
		fx.Populate(&h, &st),
	)
	if err := app.Err(); err != nil {
		t.Fatalf("node: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("node: start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			t.Fatalf("node: stop: %v", err)
		}
	})
	return &Node{Kit: k, URL: fmt.Sprintf("http://%s", *h.Addr.Load()), Config: cfg, Stores: st}
}
