// Package option holds the checks that several packages' options share,
// so that each rule is written once (docs/DESIGN.md "Options").
package option

import (
	"fmt"
	"log/slog"
	"time"
)

// Clock is the option that sets the clock field(t) to now. A nil clock is
// an invalid option: the returned function fails with an error wrapping
// errInvalid (the package's ErrInvalidOption), "…: nil clock".
func Clock[T any](now func() time.Time, errInvalid error, field func(T) *func() time.Time) func(T) error {
	return func(t T) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", errInvalid)
		}
		*field(t) = now
		return nil
	}
}

// Logger is the option that sets the logger field(t) to l; a nil l keeps
// the default (the constructors' default is a discarding logger).
func Logger[T any](l *slog.Logger, field func(T) **slog.Logger) func(T) error {
	return func(t T) error {
		if l != nil {
			*field(t) = l
		}
		return nil
	}
}
