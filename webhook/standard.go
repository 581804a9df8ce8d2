package webhook

import (
	"crypto/hmac"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names, and the Svix names accepted in their place
// when no webhook-signature header is present.
const (
	HeaderStandardID        = "webhook-id"
	HeaderStandardTimestamp = "webhook-timestamp"
	HeaderStandardSignature = "webhook-signature"
	HeaderSvixID            = "svix-id"
	HeaderSvixTimestamp     = "svix-timestamp"
	HeaderSvixSignature     = "svix-signature"
)

// standardSecretPrefix prefixes Standard Webhooks secrets.
const standardSecretPrefix = "whsec_"

// Standard verifies Standard Webhooks (https://www.standardwebhooks.com):
// webhook-id, webhook-timestamp and webhook-signature, a space-separated list
// of "v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>" (several for
// secret rotation; other versions such as v1a are ignored). The timestamp
// must be within DefaultTolerance of now, both ways. Svix's svix-id,
// svix-timestamp and svix-signature (the same scheme) are accepted when
// webhook-signature is absent.
//
// MessageID is webhook-id and Timestamp webhook-timestamp.
type Standard struct {
	key []byte
}

var _ Verifier = (*Standard)(nil)

// NewStandard returns a Standard Webhooks verifier for secret,
// "whsec_<base64 key>" (a secret without the prefix is taken as the base64
// key itself). The key is the base64-decoded part. An empty secret or one that
// is not base64 is an error wrapping ErrInvalidSecret.
func NewStandard(secret string) (*Standard, error) {
	key, err := standardKey(secret)
	if err != nil {
		return nil, err
	}
	return &Standard{key: key}, nil
}

// MinStandardKeyBytes is the shortest Standard Webhooks key accepted (the
// specification's lower bound; Svix issues 24-byte keys).
const MinStandardKeyBytes = 24

// standardKey decodes a Standard Webhooks secret (padded or unpadded
// standard base64 after an optional "whsec_").
func standardKey(secret string) ([]byte, error) {
	b64 := strings.TrimPrefix(secret, standardSecretPrefix)
	if b64 == "" {
		return nil, fmt.Errorf("%w: standard_webhooks secret is empty", ErrInvalidSecret)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("%w: standard_webhooks secret must be whsec_ followed by base64", ErrInvalidSecret)
	}
	if len(key) < MinStandardKeyBytes {
		// The spec asks for 24..64 random bytes; a short key can be guessed.
		return nil, fmt.Errorf("%w: standard_webhooks secret must decode to at least %d bytes, got %d", ErrInvalidSecret, MinStandardKeyBytes, len(key))
	}
	return key, nil
}

// Name returns "standard_webhooks".
func (s *Standard) Name() string { return VerifierStandard }

// String redacts the secret.
func (s *Standard) String() string { return redacted("Standard") }

// GoString redacts the secret.
func (s *Standard) GoString() string { return redacted("Standard") }

// MarshalText returns the verifier's name (never its secret), so that a
// configuration holding it marshals readably.
func (s *Standard) MarshalText() ([]byte, error) { return []byte(s.Name()), nil }

// parseStandardSignatures parses a webhook-signature value: space-separated
// "<version>,<base64>" entries (at most MaxSignatures). It returns the decoded
// v1 signatures; other versions and malformed entries are dropped.
func parseStandardSignatures(v string) ([][]byte, error) {
	if len(v) > MaxSignatureHeaderBytes {
		return nil, errTooLarge
	}
	var sigs [][]byte
	n := 0
	for entry := range strings.FieldsSeq(v) {
		n++
		if n > MaxSignatures {
			return nil, errTooMany
		}
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		if sig, err := base64.StdEncoding.DecodeString(b64); err == nil && len(sig) == 32 {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 {
		return nil, errNoSignature
	}
	return sigs, nil
}

// standardHeaders picks the header family a Standard Webhooks request is
// signed with: webhook-*, or svix-* when only svix-signature is present.
// Verification and the standard_webhooks/svix dedupe presets both use it,
// so the dedupe key is always the id that was signed.
func standardHeaders(h http.Header) (id, ts, sig string) {
	if len(h.Values(HeaderStandardSignature)) == 0 && len(h.Values(HeaderSvixSignature)) > 0 {
		return HeaderSvixID, HeaderSvixTimestamp, HeaderSvixSignature
	}
	return HeaderStandardID, HeaderStandardTimestamp, HeaderStandardSignature
}

// Verify checks the Standard Webhooks headers against body at now.
func (s *Standard) Verify(h http.Header, body []byte, now time.Time) (Verified, error) {
	idH, tsH, sigH := standardHeaders(h)
	sigV, err := headerValue(h, sigH, " ")
	if err != nil {
		return Verified{}, err
	}
	id, tsV := h.Get(idH), h.Get(tsH)
	if id == "" || tsV == "" || sigV == "" {
		return Verified{}, errMissingHeader
	}
	if len(id) > MaxSignatureHeaderBytes {
		return Verified{}, errTooLarge
	}
	ts, err := parseTimestamp(tsV)
	if err != nil {
		return Verified{}, err
	}
	sigs, err := parseStandardSignatures(sigV)
	if err != nil {
		return Verified{}, err
	}
	if err := checkTolerance(ts, now, DefaultTolerance); err != nil {
		return Verified{}, err
	}
	want := s.sign(id, ts, body)
	matched := false
	for _, sig := range sigs {
		// No early exit: the time taken does not depend on which one matched.
		if hmac.Equal(sig, want) {
			matched = true
		}
	}
	if !matched {
		return Verified{}, errNoMatch
	}
	return Verified{MessageID: id, Timestamp: ts, Tolerance: DefaultTolerance}, nil
}

// sign returns HMAC-SHA256(key, "<id>.<ts>.<body>").
func (s *Standard) sign(id string, ts int64, body []byte) []byte {
	return macSHA256(s.key, []byte(id), []byte{'.'}, []byte(strconv.FormatInt(ts, 10)), []byte{'.'}, body)
}

// SignStandard returns the webhook-signature value a Standard Webhooks sender
// would send for message id msgID at Unix time ts with body, signed with
// secret ("whsec_<base64>"): "v1,<base64>". It fails only for a malformed
// secret (ErrInvalidSecret). For tests and clients; the request also needs
// webhook-id: msgID and webhook-timestamp: ts.
func SignStandard(secret, msgID string, ts int64, body []byte) (string, error) {
	key, err := standardKey(secret)
	if err != nil {
		return "", err
	}
	s := Standard{key: key}
	return "v1," + base64.StdEncoding.EncodeToString(s.sign(msgID, ts, body)), nil
}

// StandardHeaders returns the three Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature) for a message signed as by
// SignStandard. For tests and clients.
func StandardHeaders(secret, msgID string, ts int64, body []byte) (http.Header, error) {
	sig, err := SignStandard(secret, msgID, ts, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(HeaderStandardID, msgID)
	h.Set(HeaderStandardTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderStandardSignature, sig)
	return h, nil
}
