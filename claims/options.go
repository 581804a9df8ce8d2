package claims

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// protocol.ErrInvalidOption is wrapped by the error of NewKV, NewKVReplay,
// NewMemory and NewMemoryReplay for an option with an invalid argument or
// a nil bucket.
var errInvalidOption = fmt.Errorf("claims: %w", protocol.ErrInvalidOption)

// Options follow docs/DESIGN.md "Options": each constructor takes its own
// option type, so an option it does not read does not compile; an option
// several constructors read has a type that is an option of each.

// KVOption configures NewKV.
type KVOption interface{ applyKV(*options) error }

// KVReplayOption configures NewKVReplay.
type KVReplayOption interface{ applyKVReplay(*options) error }

// MemOption configures NewMemory.
type MemOption interface{ applyMemory(*options) error }

// MemReplayOption configures NewMemoryReplay.
type MemReplayOption interface{ applyMemReplay(*options) error }

// ClockOption is an option of every constructor (WithClock).
type ClockOption func(*options) error

func (o ClockOption) applyKV(c *options) error        { return o(c) }
func (o ClockOption) applyKVReplay(c *options) error  { return o(c) }
func (o ClockOption) applyMemory(c *options) error    { return o(c) }
func (o ClockOption) applyMemReplay(c *options) error { return o(c) }

// LoggerOption is an option of NewKV and NewKVReplay (WithLogger).
type LoggerOption func(*options) error

func (o LoggerOption) applyKV(c *options) error       { return o(c) }
func (o LoggerOption) applyKVReplay(c *options) error { return o(c) }

// BucketOption configures BucketConfig. Its options take no argument
// that could be invalid.
type BucketOption interface{ applyBucket(*kvstore.BucketConfig) }

type bucketOption func(*kvstore.BucketConfig)

func (o bucketOption) applyBucket(c *kvstore.BucketConfig) { o(c) }

// WithExpiryEvents keeps the claims bucket's expiry markers (LimitMarkerTTL
// 1 s) for events.ExpiryWatcher when on (default off). Reopening an
// existing bucket with the other setting switches it in place, keeping its
// claims. BucketConfig.
func WithExpiryEvents(on bool) BucketOption {
	return bucketOption(func(c *kvstore.BucketConfig) { c.NoMarkers = !on })
}

// WithAsyncPersist puts the claims bucket's stream in async persist mode
// when on (default off; R1 file storage only, fixed at creation): a claim
// write is acked before it reaches the file, so a hard kill or power loss
// can lose the last acked claims (a key may be accepted once more); hooks
// are not affected. BucketConfig.
func WithAsyncPersist(on bool) BucketOption {
	return bucketOption(func(c *kvstore.BucketConfig) { c.AsyncPersist = on })
}

type memOption func(*options) error

func (o memOption) applyMemory(c *options) error { return o(c) }

type memReplayOption func(*options) error

func (o memReplayOption) applyMemReplay(c *options) error { return o(c) }

// options is what every constructor reads; each reads the fields its
// options set.
type options struct {
	now        func() time.Time
	log        *slog.Logger
	maxEntries int
	capacity   int
}

// newOptions applies opts with apply, the constructor's method of them,
// to the defaults.
func newOptions[O any](opts []O, apply func(O, *options) error) (options, error) {
	c := options{now: time.Now, log: slog.New(slog.DiscardHandler), maxEntries: DefaultMaxEntries, capacity: protocol.DefaultReplayCapacity}
	err := option.Apply(&c, opts, apply)
	return c, err
}

// WithClock sets the clock of every store (absent: time.Now; nil is an
// invalid option): KV and KVReplay turn server-time expiries into
// RetryAfter, ExpiresIn and replay TTLs with it; the memory stores expire by it.
func WithClock(now func() time.Time) ClockOption {
	return ClockOption(option.Clock(now, errInvalidOption, func(c *options) *func() time.Time { return &c.now }))
}

// WithLogger sets the logger of a bucket store (nil or absent: discard).
// It logs only what a caller cannot see in its results: unreadable
// records and contention retries.
func WithLogger(l *slog.Logger) LoggerOption {
	return LoggerOption(option.Logger(l, func(c *options) **slog.Logger { return &c.log }))
}

// WithMaxEntries bounds the number of claims a Memory holds (absent:
// DefaultMaxEntries; must be > 0). See Memory for what happens when it is
// reached.
func WithMaxEntries(n int) MemOption {
	return memOption(option.Positive(errInvalidOption, "max entries", n, func(c *options, n int) { c.maxEntries = n }))
}

// WithReplayCapacity bounds the pairs a MemoryReplay holds (absent:
// protocol.DefaultReplayCapacity; must be > 0).
func WithReplayCapacity(n int) MemReplayOption {
	return memReplayOption(option.Positive(errInvalidOption, "replay capacity", n, func(c *options, n int) { c.capacity = n }))
}
