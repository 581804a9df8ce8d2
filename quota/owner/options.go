package owner

import (
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/settings"
)

// Defaults of the owner's own options.
const (
	// DefaultLeaseTTL is how long a partition lease (and a member heartbeat)
	// lives without renewal.
	DefaultLeaseTTL = 5 * time.Second
	// DefaultMaxInFlight bounds a worker's concurrent KV-bound requests
	// (claims and counter operations).
	DefaultMaxInFlight = 256
	// DefaultCountTTL is how long a reserve/release counter lives untouched
	// when its reserve has no ttl_ms.
	DefaultCountTTL = settings.DefaultCountTTL
)

// Option configures New: the owner's own options below (WithCountTTL
// among them), and quota's routing (WithPrefix, WithPartitions) and
// decision options (WithPendingTTL, WithClock, WithLogger,
// WithRegisterer). An invalid argument makes New fail with an error
// wrapping protocol.ErrInvalidOption. Its method is unexported (in
// quota/internal/settings, which quota's shared options embed).
type Option interface {
	settings.OwnerOption
}

// ownerOption is an option of New only.
type ownerOption = settings.Func

// defaults is the owner's configuration before its options.
func defaults() settings.Config {
	c := settings.Defaults()
	c.LeaseTTL = DefaultLeaseTTL
	c.MaxInFlight = DefaultMaxInFlight
	c.DedupeTTL = protocol.DefaultCommittedTTL
	return c
}

// WithDedupeTTL sets how long a claim settled through a frame is kept
// when its settle names no TTL (default protocol.DefaultCommittedTTL, 72 h:
// the node's --dedupe-ttl, as claims.settle's).
func WithDedupeTTL(d time.Duration) Option {
	return ownerOption(settings.Positive("dedupe TTL", d, func(c *settings.Config, d time.Duration) { c.DedupeTTL = d }))
}

// WithCountTTL sets the TTL of a counter whose reserve has no ttl_ms
// (default DefaultCountTTL, 1 h). Counters live in the owners only, so this
// is an option of New alone.
func WithCountTTL(d time.Duration) Option {
	return ownerOption(settings.Positive("count TTL", d, func(c *settings.Config, d time.Duration) { c.CountTTL = d }))
}

// WithSync makes every settle the worker commits, and every reserve it
// grants, durable through s (the node's group sync) before it is
// answered. A denied reserve and a release are not synced (a lost one
// overcounts: it refuses, never grants beyond max). Default nil.
func WithSync(s kvstore.Syncer) Option {
	return ownerOption(func(c *settings.Config) error {
		c.Sync = s
		return nil
	})
}

// WithShards records the fleet's shard count s (1..protocol.MaxShards,
// dividing the partition count; default 1) beside its partition count in
// the leases bucket; an owner given another s refuses to start
// (quota.ErrShardMismatch). Claims go through claims.NewSharded.
func WithShards(s int) Option {
	return ownerOption(func(c *settings.Config) error {
		if s < 1 || s > protocol.MaxShards {
			return settings.Invalid("shards must be 1..%d, got %d", protocol.MaxShards, s)
		}
		c.Shards = s
		return nil
	})
}

// WithLeaseTTL sets the TTL of partition leases and member heartbeats
// (default 5 s; rounded up to whole seconds, at least 1 s). A crashed
// owner's partitions are served again about one TTL after its last renewal.
func WithLeaseTTL(d time.Duration) Option {
	return ownerOption(settings.Positive("lease TTL", d, func(c *settings.Config, d time.Duration) { c.LeaseTTL = kvstore.RoundTTL(d) }))
}

// WithMemberID names the worker in the fleet (default: a random NUID). Ids
// must be unique among running workers: a lease records its holder's id.
func WithMemberID(id string) Option {
	return ownerOption(func(c *settings.Config) error {
		if !quota.ValidMemberID(id) {
			return settings.Invalid("member id must be 1..%d bytes", quota.MaxMemberIDBytes)
		}
		c.MemberID = id
		return nil
	})
}

// WithMaxInFlight bounds the requests a worker has waiting on KV at once
// (claims, counter write-through), default 256. When the bound is reached
// the partition's subscription waits: back-pressure, not failure.
func WithMaxInFlight(n int) Option {
	return ownerOption(func(c *settings.Config) error {
		if n < 1 {
			return settings.Invalid("max in flight must be >= 1, got %d", n)
		}
		c.MaxInFlight = n
		return nil
	})
}
