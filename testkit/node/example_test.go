package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
	"github.com/sluice-dev/sluice/testkit/node"
)

// In a test, node.Start(t, testkit.New(t)) is a whole sluice node on an
// embedded server: here a service asks it for a rate-limit decision over
// NATS with the Go client, exactly as it would ask a production fleet.
func ExampleStart() {
	t := testkit.NewStandalone() // in a test: the test's *testing.T
	defer t.Close()

	n := node.Start(t, testkit.New(t))

	c, _ := client.New(n.Kit.Conn)
	ctx := context.Background()
	charge := quota.Charge{Kind: "hooks", Tenant: "acme", IncrementUs: 1_000_000, CapacityUs: 2_000_000}
	for range 3 {
		rep, err := c.Hit(ctx, quota.HitRequest{Charges: []quota.Charge{charge}})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println(rep.Result)
	}
	// Output:
	// ok
	// ok
	// rate_limited
}

// A consumer of one tenant's stored hooks: a durable pull consumer on the
// HOOKS stream filtered to the tenant's subjects, acking each hook once its
// own work is done. Hooks posted to the node's edge arrive here with the
// hook id the edge answered with.
func Example_consumeHooks() {
	t := testkit.NewStandalone() // in a test: the test's *testing.T
	defer t.Close()
	n := node.Start(t, testkit.New(t))

	for _, tenant := range []string{"acme", "globex"} {
		resp, err := http.Post(n.URL+"/v1/hooks/"+tenant+"/github", "application/json",
			strings.NewReader(`{"tenant":"`+tenant+`"}`))
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		resp.Body.Close()
		fmt.Println(tenant, resp.StatusCode)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := n.Kit.JS.CreateOrUpdateConsumer(ctx, n.Config.HooksStream, jetstream.ConsumerConfig{
		Durable: "acme-worker",
		// Every source of tenant acme: "<prefix>.hooks.<tenant>.<source>",
		// plus ".<type>" for a source with event_type; tokens encoded as
		// in every sluice subject (docs/PROTOCOL.md). ".>" matches both.
		FilterSubject: n.Config.Prefix + ".hooks." + kvstore.EncodeToken("acme") + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	batch, err := cons.Fetch(10, jetstream.FetchMaxWait(time.Second))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	for msg := range batch.Messages() {
		fmt.Println(msg.Subject(), string(msg.Data()), msg.Headers().Get("Nats-Msg-Id") != "")
		_ = msg.Ack() // after the hook's work is durable
	}
	// Output:
	// acme 202
	// globex 202
	// sluice.hooks.acme.github {"tenant":"acme"} true
}
