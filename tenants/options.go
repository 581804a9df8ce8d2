package tenants

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/protocol"
)

// protocol.ErrInvalidOption is wrapped by the error NewAdmin returns for an option
// with a bad argument (docs/DESIGN.md "Options").
var errInvalidOption = fmt.Errorf("tenants: %w", protocol.ErrInvalidOption)

// AdminOption configures NewAdmin.
type AdminOption interface{ applyAdmin(*Admin) error }

type adminOption func(*Admin) error

func (o adminOption) applyAdmin(a *Admin) error { return o(a) }

// RegistryOption configures NewRegistry.
type RegistryOption interface{ applyRegistry(*Registry) }

type registryOption func(*Registry)

func (o registryOption) applyRegistry(r *Registry) { o(r) }

// LoggerOption is an option of NewAdmin and NewRegistry (WithLogger).
type LoggerOption struct{ log *slog.Logger }

func (o LoggerOption) applyAdmin(a *Admin) error {
	return option.Logger(o.log, func(a *Admin) **slog.Logger { return &a.log })(a)
}

func (o LoggerOption) applyRegistry(r *Registry) {
	_ = option.Logger(o.log, func(r *Registry) **slog.Logger { return &r.log })(r) // never fails
}

// WithLogger sets the logger of the admin endpoints or of the registry
// (nil or absent: discard).
func WithLogger(l *slog.Logger) LoggerOption { return LoggerOption{l} }

// WithKeys opens the records' secrets with keys (nil or absent: no
// keyring; Registry.ReloadKeys replaces it).
func WithKeys(keys *Keyring) RegistryOption {
	return registryOption(func(r *Registry) { r.keys.Store(keys) })
}

// WithTimeout bounds one request's store calls (default
// protocol.DefaultTimeout, --store-timeout's; must be > 0).
func WithTimeout(d time.Duration) AdminOption {
	return adminOption(option.Positive(errInvalidOption, "timeout", d, func(a *Admin, d time.Duration) { a.timeout = d }))
}

// WithClock sets the clock of secrets' not-after and of records' times
// (absent: time.Now; nil is an invalid option).
func WithClock(now func() time.Time) AdminOption {
	return adminOption(option.Clock(now, errInvalidOption, func(a *Admin) *func() time.Time { return &a.now }))
}
