// Package settings is what the quota options write and the constructors
// of quota and quota/owner read: one struct, so that an option several
// constructors take (the routing, the decisions' clock and TTLs, logging,
// metrics, the owner's own settings) is written once. Options of one
// constructor only (a Router's budget, a Fleet's member count) live with
// that constructor.
package settings

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// DefaultCountTTL is the default of the shared settings' CountTTL (quota
// re-exports it).
const DefaultCountTTL = time.Hour

// Config is the shared settings and the owner's (LeaseTTL, MemberID,
// MaxInFlight, DedupeTTL: zero until quota/owner sets its defaults; Sync).
type Config struct {
	Prefix      string
	Partitions  int
	Shards      int // the owner's record of the fleet's shards (0: 1)
	PendingTTL  time.Duration
	CountTTL    time.Duration
	Now         func() time.Time
	Log         *slog.Logger
	Reg         prometheus.Registerer
	LeaseTTL    time.Duration
	MemberID    string
	MaxInFlight int
	DedupeTTL   time.Duration  // a settle's committed TTL when it names none
	Sync        kvstore.Syncer // made durable before a settle is answered (nil: the ack)
}

// Defaults is the shared settings' defaults.
func Defaults() Config {
	return Config{
		Prefix:     protocol.DefaultPrefix,
		Partitions: protocol.DefaultPartitions,
		PendingTTL: protocol.DefaultPendingTTL,
		CountTTL:   DefaultCountTTL,
		Now:        time.Now,
		Log:        slog.New(slog.DiscardHandler),
	}
}

// errInvalidOption (wrapping protocol.ErrInvalidOption) is wrapped by the
// error of an option with an invalid argument.
var errInvalidOption = fmt.Errorf("quota: %w", protocol.ErrInvalidOption)

// Invalid is the error of an option with an invalid argument.
func Invalid(format string, args ...any) error {
	return option.Invalid(errInvalidOption, format, args...)
}

// Positive is option.Positive failing with protocol.ErrInvalidOption.
func Positive[C any, T ~int | ~int64](what string, v T, set func(*C, T)) func(*C) error {
	return option.Positive(errInvalidOption, what, v, set)
}

// Required is option.Required failing with protocol.ErrInvalidOption.
func Required[C any](ok bool, msg string, set func(*C)) func(*C) error {
	return option.Required(errInvalidOption, ok, msg, set)
}

// OwnerOption is an option of owner.New (owner.Option embeds it): its
// method is unexported here, so only Func and the types embedding it
// (quota's shared options, owner's own) are options of owner.New.
type OwnerOption interface {
	applyOwner(*Config) error
}

// Func is the body of an option writing the settings. It is an
// OwnerOption; quota's options shared with owner.New embed it beside
// their own constructor's method.
type Func func(*Config) error

func (f Func) applyOwner(c *Config) error {
	if f == nil {
		return nil
	}
	return f(c)
}

// Apply applies opts (owner.New's) to c: a nil option is skipped, the
// first error is returned.
func Apply[O OwnerOption](c *Config, opts []O) error {
	return option.Apply(c, opts, func(o O, c *Config) error { return o.applyOwner(c) })
}
