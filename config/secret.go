package config

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
)

// Redacted is what a set Secret prints instead of its value.
const Redacted = "[redacted]"

// Secret holds a credential (admin token, NATS password or token). It never
// shows its value: String, Format (every verb, %#v included), MarshalJSON,
// MarshalText, MarshalYAML and LogValue all give Redacted when it is set and
// "" when it is not. The value sits behind a pointer, so even reflection-based
// printing of an enclosing value shows an address, not the secret. Use Reveal
// to read it. The zero Secret is unset. Secrets are immutable and safe to copy.
type Secret struct {
	v *string
}

// NewSecret returns a Secret holding s; an empty s gives the unset Secret.
func NewSecret(s string) Secret {
	if s == "" {
		return Secret{}
	}
	return Secret{v: &s}
}

// Reveal returns the secret's value ("" when unset).
func (s Secret) Reveal() string {
	if s.v == nil {
		return ""
	}
	return *s.v
}

// IsSet reports whether the secret has a value.
func (s Secret) IsSet() bool { return s.v != nil }

// String returns Redacted, or "" when unset.
func (s Secret) String() string {
	if s.v == nil {
		return ""
	}
	return Redacted
}

// GoString returns Redacted, or "" when unset.
func (s Secret) GoString() string { return s.String() }

// Format writes String for every verb.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalJSON returns String as a JSON string.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// MarshalText returns String.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// MarshalYAML returns String.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// LogValue returns String, for log/slog.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

var (
	_ fmt.Formatter  = Secret{}
	_ slog.LogValuer = Secret{}
	_ json.Marshaler = Secret{}
)
