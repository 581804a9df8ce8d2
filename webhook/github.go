package webhook

import "encoding/hex"

// GitHub header names.
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-GitHub-Delivery"
)

// GitHub is the verifier of the github preset: X-Hub-Signature-256,
// "sha256=" followed by the hex HMAC-SHA256 of the raw body keyed with the
// webhook secret (used as its raw bytes). GitHub signs no timestamp: Verify
// returns Timestamp 0 and the delivery id (X-GitHub-Delivery) as MessageID,
// and replay protection is by dedupe only (see the package documentation).
type GitHub = SchemeVerifier

// NewGitHub returns the github preset's verifier for secret. An empty secret
// is an error wrapping ErrInvalidSecret.
func NewGitHub(secret string) (*GitHub, error) { return newPreset(PresetGitHub, secret) }

// SignGitHub returns the X-Hub-Signature-256 value GitHub would send for body
// signed with secret: "sha256=<hex>". For tests and clients.
func SignGitHub(secret string, body []byte) string {
	return "sha256=" + hex.EncodeToString(macSHA256([]byte(secret), body))
}
