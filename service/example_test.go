package service_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/service"
)

// Example starts the sluice service with a replay store on an embedded
// nats-server (the one testkit wraps) and sends raw replay.claim requests,
// as a service in any language would.
func Example() {
	dir, err := os.MkdirTemp("", "sluice-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	// The replay store: a KV bucket with a capacity.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	b, err := kvstore.OpenBucket(ctx, js, claims.ReplayBucketConfig(kvstore.BucketNames("sluice").Replay, 1000, 1))
	if err != nil {
		panic(err)
	}

	replay, err := claims.NewKVReplay(b, 0)
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
