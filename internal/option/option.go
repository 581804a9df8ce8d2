// Package option holds the argument rules that the option constructors of
// several packages share (quota and quota/owner through
// quota/internal/settings, client, cooldown): a value that must be > 0 and
// an argument that must be given, each failing with the package's own
// ErrInvalidOption.
package option

import "fmt"

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
