package tenants

import (
	"errors"
	"log/slog"
	"time"

	"github.com/sluice-dev/sluice/internal/option"
)

// ErrInvalidOption is wrapped by the error NewAdmin returns for an option
// with a bad argument (docs/DESIGN.md "Options").
var ErrInvalidOption = errors.New("tenants: invalid option")

// DefaultAdminTimeout bounds one admin request's store calls (the same
// value as --store-timeout's default; fx passes the flag's value).
const DefaultAdminTimeout = 250 * time.Millisecond

// AdminOption configures NewAdmin.
type AdminOption interface{ applyAdmin(*Admin) error }

type adminOption func(*Admin) error

func (o adminOption) applyAdmin(a *Admin) error { return o(a) }

// WithLogger sets the admin endpoints' logger (nil or absent: discard).
func WithLogger(l *slog.Logger) AdminOption {
	return adminOption(option.Logger(l, func(a *Admin) **slog.Logger { return &a.log }))
}

// WithTimeout bounds one request's store calls (default
// DefaultAdminTimeout; must be > 0).
func WithTimeout(d time.Duration) AdminOption {
	return adminOption(option.Positive(ErrInvalidOption, "timeout", d, func(a *Admin, d time.Duration) { a.timeout = d }))
}

// WithClock sets the clock of secrets' not-after and of records' times
// (absent: time.Now; nil is an invalid option).
func WithClock(now func() time.Time) AdminOption {
	return adminOption(option.Clock(now, ErrInvalidOption, func(a *Admin) *func() time.Time { return &a.now }))
}
