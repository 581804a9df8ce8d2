package events

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
)

// lifecycle is the state of a consumer: new until start, running until
// stop, then stopped for good.
type lifecycle int

const (
	stateNew lifecycle = iota
	stateRunning
	stateStopped
)

// consumer is the one start/stop lifecycle of the Settler and the
// ExpiryWatcher: it starts at most once (else ErrStarted), creates or
// updates its durable consumer with kvstore.Retry (a cluster still forming
// can fail or hang a create), consumes until stop; stop is safe before
// start and more than once.
type consumer struct {
	kind string       // "settle", "expiry": in errors ("events: settle consume: …")
	name string       // "settler", "expiry watcher": in log lines
	log  *slog.Logger // the component's logger

	mu    sync.Mutex
	state lifecycle
	cc    jetstream.ConsumeContext
}

// consumeSpec is what start consumes: the durable consumer cfg on stream,
// handle run on the consume loop with at most pull messages buffered, and
// prepare (may be nil), run first, bounded by ctx, for what the consumer
// needs (a stream).
type consumeSpec struct {
	js      jetstream.JetStream
	stream  string
	cfg     jetstream.ConsumerConfig
	desc    string // the consumer in errors: "settle consumer settler"
	prepare func(ctx context.Context) error
	handle  jetstream.MessageHandler
	pull    int
}

// start runs sp.prepare and creates or updates the consumer, both bounded
// by ctx, and starts consuming; the consumption itself does not use ctx.
func (c *consumer) start(ctx context.Context, sp consumeSpec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != stateNew {
		return ErrStarted
	}
	if sp.prepare != nil {
		if err := sp.prepare(ctx); err != nil {
			return err
		}
	}
	var cons jetstream.Consumer
	// Every node creates the durable consumer at start: a create raced by
	// another node's is never answered (kvstore.CreateRaced), and the
	// next attempt finds it made.
	err := kvstore.Retry(ctx, func(ctx context.Context) error {
		return kvstore.CreateRaced(ctx, func(ctx context.Context) (err error) {
			cons, err = sp.js.CreateOrUpdateConsumer(ctx, sp.stream, sp.cfg)
			return err
		}, func(ctx context.Context) error {
			_, err := sp.js.Consumer(ctx, sp.stream, sp.cfg.Durable)
			return err
		})
	})
	if err != nil {
		return fmt.Errorf("events: %s: %w", sp.desc, kvstore.MapError(err))
	}
	cc, err := cons.Consume(sp.handle,
		jetstream.PullMaxMessages(sp.pull),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			c.log.Debug("consume", "err", err)
		}))
	if err != nil {
		return fmt.Errorf("events: %s consume: %w", c.kind, kvstore.MapError(err))
	}
	c.cc = cc
	c.state = stateRunning
	c.log.Info(c.name + " started")
	return nil
}

// stop marks the consumer stopped for good; when it was running it runs
// halt, which stops the consume context it is given (Stop or Drain), waits
// for the consume loop to end, then runs after (may be nil).
func (c *consumer) stop(halt func(jetstream.ConsumeContext), after func()) {
	c.mu.Lock()
	if c.state != stateRunning {
		c.state = stateStopped
		c.mu.Unlock()
		return
	}
	c.state = stateStopped
	cc := c.cc
	c.mu.Unlock()
	halt(cc)
	<-cc.Closed()
	if after != nil {
		after()
	}
	c.log.Info(c.name + " stopped")
}
