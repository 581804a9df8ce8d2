// Package webhook verifies webhook providers' signatures and extracts dedupe
// keys from webhook requests. It is pure: no I/O, no clock reads (the current
// time is an argument), no global state.
//
// A Verifier checks one source's requests with constant-time comparisons
// and returns what the edge needs for its replay claim (Verified). Every
// verifier is a SchemeVerifier: a declarative Scheme with its secret;
// Presets describe known providers. A Scheme that cannot verify correctly is
// refused at construction (ErrInvalidScheme). Every failure wraps
// ErrVerification (401 verification_failed); the wrapped reason is for logs
// only and never echoes request data or secrets.
//
// Replay claims: key Verified.ReplayKey() (<message id>/<timestamp>) in
// namespace httpapi.ReplayNamespace(tenant, source), retained until
// Verified.RetainUntil() (timestamp + tolerance). GitHub signs no timestamp,
// so its replay protection is by dedupe only (X-GitHub-Delivery, for as long
// as the committed claim lives). A genuine retry is re-signed with a fresh
// timestamp, so it has a new replay key and is answered by dedupe.
//
// ParseDedupe turns a source's dedupe spec into a Dedupe whose Key method
// extracts the key from a request; keys over MaxKeyBytes become
// "sha256:<lowercase hex>".
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Errors returned by this package. Each is returned wrapped with detail; test
// with errors.Is.
var (
	// ErrVerification is returned by every Verifier.Verify failure: a missing
	// or malformed signature header, a timestamp outside the tolerance, or no
	// matching signature. The edge answers 401 verification_failed.
	ErrVerification = errors.New("webhook: verification failed")
	// ErrUnknownVerifier is returned by Preset for a name that is not one
	// of Presets.
	ErrUnknownVerifier = errors.New("webhook: unknown verifier")
	// ErrInvalidSecret is returned by verifier constructors for an empty or
	// malformed secret. The error never contains the secret.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
	// ErrInvalidDedupe is returned by ParseDedupe for a malformed spec.
	ErrInvalidDedupe = errors.New("webhook: invalid dedupe spec")
)

// Bounds applied by the verifiers.
const (
	// DefaultTolerance is the accepted clock skew, both ways, between a
	// signed timestamp and now (Stripe and Standard Webhooks).
	DefaultTolerance = 300 * time.Second
	// MaxSignatureHeaderBytes bounds a signature header (all its values
	// together); a longer one fails verification as bad format.
	MaxSignatureHeaderBytes = 8 << 10
	// MaxSignatures bounds the number of signatures in one header.
	MaxSignatures = 64
)

// Reasons wrapped with ErrVerification (for logs and tests).
var (
	errMissingHeader = fmt.Errorf("%w: missing header", ErrVerification)
	errBadFormat     = fmt.Errorf("%w: bad format", ErrVerification)
	errTooLarge      = fmt.Errorf("%w: bad format: header too large", ErrVerification)
	errTooMany       = fmt.Errorf("%w: bad format: too many signatures", ErrVerification)
	errTimestamp     = fmt.Errorf("%w: timestamp outside tolerance", ErrVerification)
	errNoSignature   = fmt.Errorf("%w: no signature with a supported scheme", ErrVerification)
	errNoMatch       = fmt.Errorf("%w: no matching signature", ErrVerification)
)

// Verified is what a successful verification yields: the parts of the replay
// claim.
type Verified struct {
	// MessageID identifies the message: the provider's message id
	// (X-GitHub-Delivery, the Stripe event's JSON "id", webhook-id), or, when
	// the provider sends none, "sig:" followed by the signature that matched.
	// Empty only for a GitHub delivery without X-GitHub-Delivery.
	MessageID string
	// Timestamp is the signed Unix time in seconds; 0 when the provider signs
	// none (GitHub).
	Timestamp int64
	// Tolerance is the accepted skew around Timestamp (0 when Timestamp is 0).
	Tolerance time.Duration
	// BodySigned is true when the signature covers the body (hmac schemes);
	// false for a shared token, an API key or basic auth, whose requests
	// carry the same credential whatever the body.
	BodySigned bool
}

// ReplayKey returns the replay-claim key, "<MessageID>/<Timestamp>", or
// "sha256:<hex>" of it when longer than MaxKeyBytes. ok is false when there
// is nothing to claim: no timestamp (GitHub, replay protection by dedupe
// only) or no message id.
func (v Verified) ReplayKey() (key string, ok bool) {
	if v.Timestamp == 0 || v.MessageID == "" {
		return "", false
	}
	return NormalizeKey(v.MessageID + "/" + strconv.FormatInt(v.Timestamp, 10)), true
}

// RetainUntil returns the Unix second until which the replay claim must be
// kept: Timestamp + Tolerance (rounded up to whole seconds), saturating at
// math.MaxInt64.
func (v Verified) RetainUntil() int64 {
	tol := int64(math.Ceil(v.Tolerance.Seconds()))
	if v.Timestamp > math.MaxInt64-tol {
		return math.MaxInt64
	}
	return v.Timestamp + tol
}

// Verifier checks one provider's webhook signatures. Implementations are
// immutable and safe for concurrent use; they never print their secret.
type Verifier interface {
	// Name is the verifier's name (its scheme's: a preset's, or custom).
	Name() string
	// Verify checks the signature of a request with headers h and raw body
	// body at time now. Every failure wraps ErrVerification.
	Verify(h http.Header, body []byte, now time.Time) (Verified, error)
}

// macSHA256 returns HMAC-SHA256(key, parts...).
func macSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// headerValue returns the values of header name joined with sep, bounded by
// MaxSignatureHeaderBytes; "" when absent.
func headerValue(h http.Header, name, sep string) (string, error) {
	vs := h.Values(name)
	n := 0
	for i, v := range vs {
		n += len(v)
		if i > 0 {
			n += len(sep)
		}
		if n > MaxSignatureHeaderBytes {
			return "", errTooLarge
		}
	}
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	out := vs[0]
	for _, v := range vs[1:] {
		out += sep + v
	}
	return out, nil
}

// parseTimestamp parses a signed Unix timestamp: 1..18 ASCII digits (no sign,
// no spaces), so that every accepted value has one canonical form.
func parseTimestamp(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, errBadFormat
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errBadFormat
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errBadFormat
	}
	return ts, nil
}

// checkTolerance reports errTimestamp unless |now - ts| <= tol.
func checkTolerance(ts int64, now time.Time, tol time.Duration) error {
	n := now.Unix()
	t := int64(tol / time.Second)
	// ts and t are bounded (ts < 10^18, t small), so these cannot overflow
	// for any now that is not within t of the int64 limits.
	if n > math.MinInt64+t && ts < n-t {
		return errTimestamp
	}
	if n < math.MaxInt64-t && ts > n+t {
		return errTimestamp
	}
	return nil
}
