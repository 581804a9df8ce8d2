// Package option holds the rules that several packages' option
// constructors share, so that each is written once (docs/DESIGN.md
// "Options"): a value that must be > 0, an argument that must be given, a
// nil clock is invalid, a nil logger keeps the default; each failure wraps
// the package's own ErrInvalidOption.
package option

import (
	"fmt"
	"log/slog"
	"time"
)

// Apply applies opts to c with apply, the constructor's method of them: a
// nil option is skipped, the first error is returned.
func Apply[C, O any](c *C, opts []O, apply func(O, *C) error) error {
	for _, o := range opts {
		if any(o) == nil {
			continue
		}
		if err := apply(o, c); err != nil {
			return err
		}
	}
	return nil
}

// Invalid is the error of an option with an invalid argument: sentinel
// (the package's ErrInvalidOption) with the reason.
func Invalid(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// Positive is the body of an option taking a value that must be > 0 (a
// duration, a count): it calls set with v, or fails with sentinel and
// "<what> must be > 0, got <v>".
func Positive[C any, T ~int | ~int64](sentinel error, what string, v T, set func(*C, T)) func(*C) error {
	return func(c *C) error {
		if v <= 0 {
			return Invalid(sentinel, "%s must be > 0, got %v", what, v)
		}
		set(c, v)
		return nil
	}
}

// Required is the body of an option whose argument must be given (a
// function, an interface): it calls set, or fails with sentinel and msg
// when ok is false.
func Required[C any](sentinel error, ok bool, msg string, set func(*C)) func(*C) error {
	return func(c *C) error {
		if !ok {
			return Invalid(sentinel, "%s", msg)
		}
		set(c)
		return nil
	}
}

// Clock is the option that sets the clock field(t) to now. A nil clock is
// an invalid option: the returned function fails with an error wrapping
// errInvalid (the package's ErrInvalidOption), "…: nil clock".
func Clock[T any](now func() time.Time, errInvalid error, field func(T) *func() time.Time) func(T) error {
	return func(t T) error {
		if now == nil {
			return Invalid(errInvalid, "nil clock")
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
