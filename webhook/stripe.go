package webhook

import (
	"encoding/hex"
	"strconv"
)

// HeaderStripeSignature is Stripe's signature header.
const HeaderStripeSignature = "Stripe-Signature"

// Stripe is the verifier of the stripe preset: Stripe-Signature,
// "t=<unix>,v1=<hex>[,v1=<hex>…]", where each v1 is the hex HMAC-SHA256 of
// "<t>.<body>" keyed with the endpoint secret used as its raw bytes (the
// whole "whsec_…" string is the key). Several v1 values are allowed (secret
// rotation), other schemes (v0 …) are ignored, and t must be within
// DefaultTolerance of now, both ways.
//
// MessageID is the event's JSON "id" (a string, or an integer in decimal);
// for a body without one it is "sig:" + the hex signature that matched.
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
