package node_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/protocol"
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
	charge := protocol.Charge{Kind: "hooks", Tenant: "acme", IncrementUs: 1_000_000, CapacityUs: 2_000_000}
	for range 3 {
		rep, err := c.Hit(ctx, protocol.HitRequest{Charges: []protocol.Charge{charge}})
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
		FilterSubject: n.Config.Prefix + ".hooks." + protocol.EncodeToken("acme") + ".>",
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

// A production worker of one tenant's hooks (docs/CONSUMING.md): the
// operator created its durable consumer (here the example does, with the
// settings CONSUMING.md gives nats consumer add); the worker only consumes.
// Each hook is acked once its work is durable, a transient failure is
// retried later with NakWithDelay, and a hook that can never succeed is
// terminated (Term) instead of being redelivered until MaxDeliver.
func Example_consumeInProduction() {
	t := testkit.NewStandalone() // in a test: the test's *testing.T
	defer t.Close()
	n := node.Start(t, testkit.New(t))
	for _, body := range []string{`{"n":1}`, `{"poison":true}`} {
		resp, err := http.Post(n.URL+"/v1/hooks/acme/gh", "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		resp.Body.Close()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The operator's part: nats consumer add HOOKS acme-gh --pull --ack explicit
	//   --filter 'sluice.hooks.acme.gh.>' … --max-deliver 5 --wait 30s --defaults
	_, err := n.Kit.JS.CreateOrUpdateConsumer(ctx, n.Config.HooksStream, jetstream.ConsumerConfig{
		Durable:        "acme-gh",
		FilterSubjects: []string{"sluice.hooks.acme.gh", "sluice.hooks.acme.gh.>"},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxDeliver:     5,
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}

	// The worker's part: it looks the consumer up, never creates it.
	cons, err := n.Kit.JS.Consumer(ctx, n.Config.HooksStream, "acme-gh")
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	done := make(chan struct{}, 2)
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		md, err := msg.Metadata()
		if err != nil {
			_ = msg.Nak()
			return
		}
		switch {
		case strings.Contains(string(msg.Data()), "poison"):
			fmt.Println("term", string(msg.Data()))
			_ = msg.Term() // never again: it cannot succeed
			done <- struct{}{}
		case md.NumDelivered == 1:
			fmt.Println("nak", string(msg.Data()), "delivery", md.NumDelivered)
			_ = msg.NakWithDelay(200 * time.Millisecond) // a transient failure: again later
		default:
			fmt.Println("ack", string(msg.Data()), "delivery", md.NumDelivered)
			_ = msg.DoubleAck(ctx) // Ack, and wait for the server to have it
			done <- struct{}{}
		}
	})
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	defer cc.Stop()
	for range 2 {
		select {
		case <-done:
		case <-ctx.Done():
			fmt.Println("error:", ctx.Err())
			return
		}
	}
	// Output:
	// nak {"n":1} delivery 1
	// term {"poison":true}
	// ack {"n":1} delivery 2
}
