package hooks

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/protocol"
)

// EnsureHub creates or updates what a hub (a node that keeps hooks, not
// a leaf) stores them in, and returns the store writing to it: the
// advisory capture and DEADLETTER (EnsureDeadLetters), then the hooks
// stream of each of cfg.Shards shards (EnsureStreams; shard k placed at
// place(k), nil: where the server chooses), the managed consumers'
// metrics registered on reg (RegisterConsumerMetrics; nil: none). The
// dead-letter copier is StartDeadLetters. Errors: ErrInvalidConfig, the
// server's, reg's.
func EnsureHub(ctx context.Context, js jetstream.JetStream, cfg StreamConfig, place func(shard int) *jetstream.Placement, reg prometheus.Registerer) (*HookStore, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = protocol.HooksStreamName
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	s := NewShardedHookStore(js, cfg.Prefix, cfg.Name, cfg.Shards)
	if reg != nil {
		if err := RegisterConsumerMetrics(reg, s); err != nil {
			return nil, err
		}
	}
	if err := EnsureDeadLetters(ctx, js, cfg.Prefix, cfg.Name, cfg.Shards, cfg.Replicas); err != nil {
		return nil, err
	}
	if _, err := EnsureStreams(ctx, js, cfg, cfg.Shards, place); err != nil {
		return nil, err
	}
	return s, nil
}
