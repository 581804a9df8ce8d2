package webhook

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// GitHub header names.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
)

// GitHub verifies GitHub's X-Hub-Signature-256: "sha256=" followed by the hex
// HMAC-SHA256 of the raw body keyed with the webhook secret (used as its raw
// bytes). GitHub signs no timestamp: Verify returns Timestamp 0 and the
// delivery id (X-GitHub-Delivery) as MessageID, and replay protection is by
// dedupe only (see the package documentation).
type GitHub struct {
	key []byte
}

var _ Verifier = (*GitHub)(nil)

// NewGitHub returns a GitHub verifier for secret. An empty secret is an error
// wrapping ErrInvalidSecret.
func NewGitHub(secret string) (*GitHub, error) {
	if secret == "" {
		return nil, fmt.Errorf("%w: github secret is empty", ErrInvalidSecret)
	}
	return &GitHub{key: []byte(secret)}, nil
}

// Name returns "github".
func (g *GitHub) Name() string { return VerifierGitHub }

// String redacts the secret.
func (g *GitHub) String() string { return redacted("GitHub") }

// GoString redacts the secret.
func (g *GitHub) GoString() string { return redacted("GitHub") }

// MarshalText returns the verifier's name (never its secret), so that a
// configuration holding it marshals readably.
func (g *GitHub) MarshalText() ([]byte, error) { return []byte(g.Name()), nil }

// Verify checks X-Hub-Signature-256 against body. now is unused (GitHub
// signs no timestamp). Exactly one X-Hub-Signature-256 value is accepted.
func (g *GitHub) Verify(h http.Header, body []byte, now time.Time) (Verified, error) {
	vs := h.Values(HeaderGitHubSignature)
	switch {
	case len(vs) == 0 || vs[0] == "":
		return Verified{}, errMissingHeader
	case len(vs) > 1:
		return Verified{}, errBadFormat
	case len(vs[0]) > MaxSignatureHeaderBytes:
		return Verified{}, errTooLarge
	}
	hexSig, ok := strings.CutPrefix(vs[0], "sha256=")
	if !ok {
		return Verified{}, errNoSignature
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil || len(sig) != 32 {
		return Verified{}, errBadFormat
	}
	if !hmac.Equal(sig, macSHA256(g.key, body)) {
		return Verified{}, errNoMatch
	}
	return Verified{MessageID: h.Get(HeaderGitHubDelivery)}, nil
}

// SignGitHub returns the X-Hub-Signature-256 value GitHub would send for body
// signed with secret: "sha256=<hex>". For tests and clients.
func SignGitHub(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(macSHA256([]byte(secret), body))
}
