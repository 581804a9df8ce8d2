package protocol

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultPrefix is the default subject prefix and bucket name stem.
const DefaultPrefix = "sluice"

// MaxPrefixBytes bounds a subject prefix.
const MaxPrefixBytes = 64

// Plain reports whether b is one of [A-Za-z0-9_-], the bytes of a subject
// token that need no encoding.
func Plain(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-'
}

// ValidatePrefix checks a subject prefix: one or more '.'-separated tokens of
// [A-Za-z0-9_-], at most MaxPrefixBytes bytes. The error says "prefix: …".
func ValidatePrefix(p string) error {
	if p == "" || len(p) > MaxPrefixBytes {
		return fmt.Errorf("prefix: must be 1..%d bytes, got %d", MaxPrefixBytes, len(p))
	}
	for tok := range strings.SplitSeq(p, ".") {
		plain := tok != ""
		for i := 0; i < len(tok); i++ {
			plain = plain && Plain(tok[i])
		}
		if !plain {
			return fmt.Errorf("prefix: invalid prefix %q (want '.'-separated tokens of [A-Za-z0-9_-])", p)
		}
	}
	return nil
}

// ErrInvalidToken is returned by DecodeToken for a string that EncodeToken
// cannot have produced, and by Split for an empty string.
var ErrInvalidToken = errors.New("protocol: invalid token")

// The token codec is the one place where user-supplied strings (tenant,
// source, dedupe key, namespace, principal …) become parts of KV keys and
// NATS subjects. An encoded token is never empty, holds only [A-Za-z0-9_=-]
// (so no input can add a token, become a wildcard or leave its position) and
// is reversible: DecodeToken(EncodeToken(s)) == s. Bytes in [A-Za-z0-9_-]
// stand for themselves, every other byte is "=" and two upper-case hex
// digits, and the empty string is a lone "=": "a.b" -> "a=2Eb".

const hexDigits = "0123456789ABCDEF"

// emptyToken is the encoding of the empty string.
const emptyToken = "="

// encodedLen is the length of EncodeToken(s) without building it.
func encodedLen(s string) int {
	if s == "" {
		return len(emptyToken)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if Plain(s[i]) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

// EncodeToken encodes one user-supplied string as a single KV-key and
// subject token. See the comment above encodedLen for the guarantees.
func EncodeToken(s string) string {
	if s == "" {
		return emptyToken
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if !Plain(s[i]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(encodedLen(s))
	appendToken(&b, s)
	return b.String()
}

func appendToken(b *strings.Builder, s string) {
	if s == "" {
		b.WriteString(emptyToken)
		return
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if Plain(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0F])
	}
}

// DecodeToken reverses EncodeToken. It returns ErrInvalidToken for any string
// EncodeToken cannot produce (so the mapping is a bijection onto its image).
func DecodeToken(t string) (string, error) {
	if t == emptyToken {
		return "", nil
	}
	if t == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	out := make([]byte, 0, len(t))
	for i := 0; i < len(t); i++ {
		c := t[i]
		if Plain(c) {
			out = append(out, c)
			continue
		}
		if c != '=' || i+2 >= len(t) {
			return "", fmt.Errorf("%w: byte %q at %d", ErrInvalidToken, c, i)
		}
		hi, ok1 := unhex(t[i+1])
		lo, ok2 := unhex(t[i+2])
		if !ok1 || !ok2 {
			return "", fmt.Errorf("%w: bad escape at %d", ErrInvalidToken, i)
		}
		v := hi<<4 | lo
		if Plain(v) {
			// EncodeToken never escapes a plain byte: reject to stay injective.
			return "", fmt.Errorf("%w: needless escape at %d", ErrInvalidToken, i)
		}
		out = append(out, v)
		i += 2
	}
	return string(out), nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Join encodes each part and joins them with '.', giving a multi-token KV
// key or subject suffix. Join(a...) == Join(b...) iff a and b are equal
// slices (the codec never emits '.').
func Join(parts ...string) string {
	var b strings.Builder
	n := len(parts)
	for _, p := range parts {
		n += encodedLen(p)
	}
	b.Grow(n)
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('.')
		}
		appendToken(&b, p)
	}
	return b.String()
}

// Split reverses Join: it splits on '.' and decodes every token.
func Split(joined string) ([]string, error) {
	if joined == "" {
		return nil, fmt.Errorf("%w: empty", ErrInvalidToken)
	}
	toks := strings.Split(joined, ".")
	out := make([]string, len(toks))
	for i, t := range toks {
		s, err := DecodeToken(t)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// TenantToken is a tenant as one subject token (EncodeToken: never '.',
// '*' or '>').
func TenantToken(tenant string) string { return EncodeToken(tenant) }
