package service_test

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/service"
	"github.com/sluice-dev/sluice/testkit"
)

// Example starts the sluice service with a replay store on an embedded
// nats-server (from testkit) and sends raw replay.claim requests,
// as a service in any language would.
func Example() {
	t := testkit.NewStandalone() // in a test: testkit.New(t) with the test's *testing.T
	defer t.Close()
	k := testkit.New(t)
	nc := k.Conn

	// The replay store: a KV bucket with a capacity.
	b := k.Bucket(t, claims.ReplayBucketConfig(kvstore.BucketNames("sluice").Replay, 1000, 1))

	replay, err := claims.NewKVReplay(b)
	if err != nil {
		panic(err)
	}
	svc, err := service.New(nc, service.Config{Replay: replay})
	if err != nil {
		panic(err)
	}
	defer svc.Stop()

	// A client: plain NATS request/reply with a JSON body.
	req := []byte(`{"namespace":"acme/stripe","key":"evt_1","retain_until":4102444800}`)
	for range 2 {
		reply, err := nc.Request("sluice.v1.replay.claim", req, 2*time.Second)
		if err != nil {
			panic(err)
		}
		fmt.Println(string(reply.Data))
	}
	// A malformed request: micro's error headers.
	reply, err := nc.Request("sluice.v1.replay.claim", []byte(`{"namespace":"acme/stripe","key":"evt_1"}`), 2*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(reply.Header.Get("Nats-Service-Error-Code"), reply.Header.Get("Nats-Service-Error"))
	// Output:
	// {"result":"claimed"}
	// {"result":"already_claimed"}
	// 400 invalid_request: retain_until is required
}
