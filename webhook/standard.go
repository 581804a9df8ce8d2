package webhook

import (
	"encoding/base64"
	"net/http"
	"strconv"
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

// Standard is the verifier of the standard_webhooks preset
// (https://www.standardwebhooks.com): webhook-signature is a space-separated
// list of "v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>" (other
// versions ignored), the timestamp within DefaultTolerance both ways;
// svix-* headers (the same scheme) are accepted when webhook-signature is
// absent. MessageID is webhook-id and Timestamp webhook-timestamp.
type Standard = SchemeVerifier

// NewStandard returns the standard_webhooks preset's verifier for secret,
// "whsec_<base64 key>" (or the base64 key alone), the key at least
// MinStandardKeyBytes. A bad secret is an error wrapping ErrInvalidSecret.
func NewStandard(secret string) (*Standard, error) { return newPreset(PresetStandard, secret) }

// MinStandardKeyBytes is the shortest Standard Webhooks key accepted (the
// specification's lower bound; Svix issues 24-byte keys).
const MinStandardKeyBytes = 24

// standardHeaders picks the header family a Standard Webhooks request is
// signed with: webhook-*, or svix-* when only svix-signature is present (the
// preset's Fallback). The standard_webhooks/svix dedupe presets use it, so
// the dedupe key is always the id that was signed.
func standardHeaders(h http.Header) (id, ts, sig string) {
	if len(h.Values(HeaderStandardSignature)) == 0 && len(h.Values(HeaderSvixSignature)) > 0 {
		return HeaderSvixID, HeaderSvixTimestamp, HeaderSvixSignature
	}
	return HeaderStandardID, HeaderStandardTimestamp, HeaderStandardSignature
}

// SignStandard returns the webhook-signature value ("v1,<base64>") a
// Standard Webhooks sender would send for msgID at Unix time ts with body
// and secret ("whsec_<base64>"); it fails only for a malformed secret. For
// tests and clients.
func SignStandard(secret, msgID string, ts int64, body []byte) (string, error) {
	v, err := NewStandard(secret)
	if err != nil {
		return "", err
	}
	mac := macSHA256(v.key, []byte(msgID), []byte{'.'}, []byte(strconv.FormatInt(ts, 10)), []byte{'.'}, body)
	return "v1," + base64.StdEncoding.EncodeToString(mac), nil
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
