package testkit

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
)

// WaitJetStream waits until the server nc is connected to answers
// JetStream API calls (a meta leader is known), or ctx ends. nc stays open.
func WaitJetStream(ctx context.Context, nc *nats.Conn) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return kvstore.WaitReady(ctx, js)
}
