package webhook

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds of SchemeFromFields' input.
const (
	// MaxSchemeFields bounds the fields of a scheme given as text.
	MaxSchemeFields = 32
	// MaxSchemeFieldBytes bounds each field's name and value.
	MaxSchemeFieldBytes = 1024
)

// schemeFields are the text fields of a Scheme, by their YAML/JSON name.
// The fallback's fields are "fallback.header", "fallback.timestamp_header"
// and "fallback.id_header".
func schemeFields(s *Scheme) map[string]*string {
	return map[string]*string{
		"name": &s.Name, "type": &s.Type, "header": &s.Header, "prefix": &s.Prefix, "format": &s.Format,
		"separator": &s.Separator, "signature_key": &s.SignatureKey, "timestamp_key": &s.TimestampKey,
		"encoding": &s.Encoding, "algorithm": &s.Algorithm, "signed": &s.Signed,
		"timestamp_header": &s.TimestampHeader, "id_header": &s.IDHeader, "id_json": &s.IDJSON,
		"url": &s.URL, "secret_encoding": &s.SecretEncoding,
	}
}

// SchemeFromFields builds a Scheme from its fields given as text, keyed by
// the names of docs/PROTOCOL.md ("Declarative verification"); tolerance as a
// Go duration or whole seconds, the fallback's as fallback.header,
// fallback.timestamp_header and fallback.id_header; {"name": "github"} alone
// is the preset. It is the one reading of a scheme as text (YAML, records);
// an unknown field or bad tolerance wraps ErrInvalidScheme naming the field.
// The result is not validated (Scheme.Validate, NewSchemeVerifier).
func SchemeFromFields(fields map[string]string) (Scheme, error) {
	var s Scheme
	if len(fields) > MaxSchemeFields {
		return Scheme{}, fmt.Errorf("%w: at most %d fields", ErrInvalidScheme, MaxSchemeFields)
	}
	text := schemeFields(&s)
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		v := fields[k]
		if len(k) > MaxSchemeFieldBytes || len(v) > MaxSchemeFieldBytes {
			return Scheme{}, fmt.Errorf("%w: field names and values of at most %d bytes", ErrInvalidScheme, MaxSchemeFieldBytes)
		}
		if p, ok := text[k]; ok {
			*p = v
			continue
		}
		switch k {
		case "tolerance":
			d, err := parseTolerance(v)
			if err != nil {
				return Scheme{}, &SchemeFieldError{Field: k, Err: fmt.Errorf("%w: %v", ErrInvalidScheme, err)}
			}
			s.Tolerance = d
		case "fallback.header", "fallback.timestamp_header", "fallback.id_header":
			if s.Fallback == nil {
				s.Fallback = &HeaderNames{}
			}
			switch k {
			case "fallback.header":
				s.Fallback.Header = v
			case "fallback.timestamp_header":
				s.Fallback.TimestampHeader = v
			default:
				s.Fallback.IDHeader = v
			}
		default:
			return Scheme{}, &SchemeFieldError{Field: k, Err: fmt.Errorf("%w: unknown field", ErrInvalidScheme)}
		}
	}
	return s, nil
}

// SchemeFieldError is SchemeFromFields' error about one field (unknown, or
// a tolerance that does not parse). Field is at most MaxSchemeFieldBytes.
type SchemeFieldError struct {
	Field string
	Err   error
}

func (e *SchemeFieldError) Error() string { return fmt.Sprintf("%.64q: %v", e.Field, e.Err) }
func (e *SchemeFieldError) Unwrap() error { return e.Err }

// parseTolerance reads a tolerance: a Go duration ("5m", "300s") or whole
// seconds ("300").
func parseTolerance(v string) (time.Duration, error) {
	if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
		if n < 0 || n > int64(MaxTolerance/time.Second) {
			return 0, fmt.Errorf("want 1..%d seconds, got %d", int64(MaxTolerance/time.Second), n)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 5m or whole seconds, got %.64q", v)
	}
	return d, nil
}

// IsSchemeType reports whether name is a scheme type (hmac, token, basic):
// a custom scheme, as opposed to a preset name.
func IsSchemeType(name string) bool {
	return slices.Contains([]string{SchemeHMAC, SchemeToken, SchemeBasic}, name)
}

// KnownScheme reports whether name is a preset (Presets) or a scheme type.
func KnownScheme(name string) bool {
	_, ok := presets[name]
	return ok || IsSchemeType(name)
}
