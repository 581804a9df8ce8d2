package client

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sluice-dev/sluice/protocol"
)

// options collects what the Options set.
type options struct {
	prefix        string
	timeout       time.Duration
	settleTimeout time.Duration
	tracer        trace.Tracer
	tenant        string
}

// Option configures New. An Option given a bad value makes New fail with
// an error wrapping protocol.ErrInvalidOption.
type Option interface{ applyClient(*options) error }

type clientOption func(*options) error

func (o clientOption) applyClient(c *options) error { return o(c) }

// WithPrefix sets the subject prefix of the service (default "sluice", the
// service's --prefix). It must pass protocol.ValidatePrefix: 1..64 bytes of
// '.'-separated tokens of [A-Za-z0-9_-].
func WithPrefix(prefix string) Option {
	return clientOption(func(o *options) error {
		if err := protocol.ValidatePrefix(prefix); err != nil {
			return fmt.Errorf("%w: %w", errInvalidOption, err)
		}
		o.prefix = prefix
		return nil
	})
}

// WithTimeout sets the deadline of a call whose context has none (default
// protocol.DefaultTimeout, the service's own default store timeout,
// which it counts from the request's arrival). It must be > 0. A context with a deadline is always
// used as is, longer or shorter.
func WithTimeout(d time.Duration) Option {
	return positive("timeout", d, func(o *options) { o.timeout = d })
}

// WithSettleTimeout sets the deadline of Settle, SettleTTL and
// ReleaseClaim when their context has none (default
// protocol.DefaultSettleTimeout, the service's settle budget;
// never less than the WithTimeout value). It must be > 0.
func WithSettleTimeout(d time.Duration) Option {
	return positive("settle timeout", d, func(o *options) { o.settleTimeout = d })
}

// positive is an Option taking a duration that must be > 0: it calls set,
// or fails with protocol.ErrInvalidOption and "<what> must be > 0, got <d>".
func positive(what string, d time.Duration, set func(*options)) Option {
	return clientOption(func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("%w: %s must be > 0, got %v", errInvalidOption, what, d)
		}
		set(o)
		return nil
	})
}

// WithTenant sends every call but Reset to the tenant-scoped subjects of
// tenant, <prefix>.v1.t.<tenant>.<endpoint> (PROTOCOL.md "Roles"): what a
// NATS user with the service role for tenant may publish. The service then
// refuses (400) a call acting for another tenant. Reset stays on the
// unscoped subject (operators only). tenant must be 1..256 bytes.
func WithTenant(tenant string) Option {
	return clientOption(func(o *options) error {
		if tenant == "" || len(tenant) > 256 {
			return fmt.Errorf("%w: tenant must be 1..256 bytes", errInvalidOption)
		}
		o.tenant = tenant
		return nil
	})
}

// WithTracer traces every call with a client span of tracer (nil: no
// spans of the client's own). Either way a call whose context carries a
// span context sends it as the request's traceparent header (W3C), so the
// service's span joins the caller's trace.
func WithTracer(tracer trace.Tracer) Option {
	return clientOption(func(o *options) error {
		o.tracer = tracer
		return nil
	})
}
