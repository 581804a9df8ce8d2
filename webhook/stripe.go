package webhook

import (
	"encoding/hex"
	"strconv"
)

// HeaderStripeSignature is Stripe's signature header.
const HeaderStripeSignature = "Stripe-Signature"

// Stripe is the verifier of the stripe preset: Stripe-Signature
// "t=<unix>,v1=<hex>[,v1=<hex>…]", each v1 the hex HMAC-SHA256 of
// "<t>.<body>" keyed with the whole "whsec_…" secret (other schemes
// ignored), t within DefaultTolerance both ways. MessageID is the body's
// JSON "id" (an integer in decimal), else "sig:" + the matching signature.
type Stripe = SchemeVerifier

// NewStripe returns the stripe preset's verifier for secret (typically
// "whsec_…", used as is). An empty secret is an error wrapping
// ErrInvalidSecret.
func NewStripe(secret string) (*Stripe, error) { return newPreset(PresetStripe, secret) }

// SignStripe returns the Stripe-Signature value Stripe would send for body
// signed with secret at Unix time ts: "t=<ts>,v1=<hex>". For tests and
// clients.
func SignStripe(secret string, ts int64, body []byte) string {
	t := strconv.FormatInt(ts, 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(macSHA256([]byte(secret), []byte(t), []byte{'.'}, body))
}
