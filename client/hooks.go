package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/protocol"
)

// HooksStream is the stream holding tenant's hooks in a fleet of shards
// shards (--partitions P/S: S; docs/PROTOCOL.md "Shards"): HOOKS, or
// HOOKS_<k> for the tenant's shard k. A consumer of one tenant reads
// this one stream, with the filters it would use in a fleet without
// shards.
func HooksStream(tenant string, shards int) string {
	return protocol.TenantHooksStream(tenant, shards)
}

// HooksStreams are the hooks streams of every shard of a fleet of shards
// shards, shard k at index k: what a reader of every tenant's hooks reads.
func HooksStreams(shards int) []string {
	out := make([]string, max(shards, 1))
	for k := range out {
		out[k] = protocol.HooksStream(k)
	}
	return out
}

// ConsumeAll reads every tenant's hooks in a fleet of shards shards: it
// consumes the durable consumer named consumer (provisioned by an operator
// on every shard's stream; never created here) of each stream, calling
// handle from one goroutine per stream: each tenant's hooks come in order,
// hooks of different shards in none. StopAll the returned ConsumeContexts to
// end it; on an error none is left running.
func ConsumeAll(ctx context.Context, js jetstream.JetStream, shards int, consumer string, handle jetstream.MessageHandler, opts ...jetstream.PullConsumeOpt) (Consumers, error) {
	if js == nil || handle == nil || consumer == "" {
		return nil, errors.New("sluice client: ConsumeAll needs a JetStream, a consumer name and a handler")
	}
	var out Consumers
	for _, stream := range HooksStreams(shards) {
		c, err := js.Consumer(ctx, stream, consumer)
		if err == nil {
			var cc jetstream.ConsumeContext
			if cc, err = c.Consume(handle, opts...); err == nil {
				out = append(out, cc)
				continue
			}
		}
		out.StopAll()
		return nil, fmt.Errorf("sluice client: consumer %s on %s: %w", consumer, stream, err)
	}
	return out, nil
}

// Consumers are the consumptions ConsumeAll started, one per stream.
type Consumers []jetstream.ConsumeContext

// StopAll stops each of them (and waits until each has stopped).
func (cs Consumers) StopAll() {
	for _, c := range cs {
		c.Stop()
		<-c.Closed()
	}
}
