package webhook

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderStripeSignature is Stripe's signature header.
const HeaderStripeSignature = "Stripe-Signature"

// Stripe verifies Stripe's Stripe-Signature header,
// "t=<unix>,v1=<hex>[,v1=<hex>…]", where each v1 is the hex
// HMAC-SHA256 of "<t>.<body>" keyed with the endpoint secret used as its raw
// bytes (the whole "whsec_…" string is the key). Several v1 values are
// allowed (secret rotation), other schemes (v0 …) are ignored, and t must be
// within DefaultTolerance of now, both ways.
//
// MessageID is the event's JSON "id" (a string, or an integer in decimal);
// for a body without one it is "sig:" + the hex signature that matched.
type Stripe struct {
	key []byte
}

var _ Verifier = (*Stripe)(nil)

// NewStripe returns a Stripe verifier for secret (typically "whsec_…", used
// as is). An empty secret is an error wrapping ErrInvalidSecret.
func NewStripe(secret string) (*Stripe, error) {
	if secret == "" {
		return nil, fmt.Errorf("%w: stripe secret is empty", ErrInvalidSecret)
	}
	return &Stripe{key: []byte(secret)}, nil
}

// Name returns "stripe".
func (s *Stripe) Name() string { return VerifierStripe }

// String redacts the secret.
func (s *Stripe) String() string { return redacted("Stripe") }

// GoString redacts the secret.
func (s *Stripe) GoString() string { return redacted("Stripe") }

// MarshalText returns the verifier's name (never its secret), so that a
// configuration holding it marshals readably.
func (s *Stripe) MarshalText() ([]byte, error) { return []byte(s.Name()), nil }

// stripeHeader is a parsed Stripe-Signature header.
type stripeHeader struct {
	ts   int64
	sigs [][]byte // decoded v1 signatures (malformed ones are dropped)
	v1   int      // v1 entries seen, malformed included
}

// parseStripeHeader parses a Stripe-Signature value: comma-separated
// key=value items; exactly one t, any number (up to MaxSignatures) of v1;
// other keys and items without '=' are ignored.
func parseStripeHeader(v string) (stripeHeader, error) {
	var sh stripeHeader
	if len(v) > MaxSignatureHeaderBytes {
		return sh, errTooLarge
	}
	seenT := false
	for item := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			if seenT {
				return sh, errBadFormat
			}
			ts, err := parseTimestamp(val)
			if err != nil {
				return sh, err
			}
			sh.ts, seenT = ts, true
		case "v1":
			sh.v1++
			if sh.v1 > MaxSignatures {
				return sh, errTooMany
			}
			if sig, err := hex.DecodeString(val); err == nil && len(sig) == 32 {
				sh.sigs = append(sh.sigs, sig)
			}
		}
	}
	if !seenT {
		return sh, errBadFormat
	}
	if sh.v1 == 0 {
		return sh, errNoSignature
	}
	return sh, nil
}

// Verify checks Stripe-Signature against body at now.
func (s *Stripe) Verify(h http.Header, body []byte, now time.Time) (Verified, error) {
	v, err := headerValue(h, HeaderStripeSignature, ",")
	if err != nil {
		return Verified{}, err
	}
	if v == "" {
		return Verified{}, errMissingHeader
	}
	sh, err := parseStripeHeader(v)
	if err != nil {
		return Verified{}, err
	}
	if err := checkTolerance(sh.ts, now, DefaultTolerance); err != nil {
		return Verified{}, err
	}
	want := macSHA256(s.key, []byte(strconv.FormatInt(sh.ts, 10)), []byte{'.'}, body)
	matched := false
	for _, sig := range sh.sigs {
		// No early exit: the time taken does not depend on which one matched.
		if hmac.Equal(sig, want) {
			matched = true
		}
	}
	if !matched {
		return Verified{}, errNoMatch
	}
	id, ok := jsonLookup(body, []string{"id"})
	if !ok {
		id = "sig:" + hex.EncodeToString(want)
	}
	return Verified{MessageID: id, Timestamp: sh.ts, Tolerance: DefaultTolerance}, nil
}

// SignStripe returns the Stripe-Signature value Stripe would send for body
// signed with secret at Unix time ts: "t=<ts>,v1=<hex>". For tests and
// clients.
func SignStripe(secret string, ts int64, body []byte) string {
	t := strconv.FormatInt(ts, 10)
	return "t=" + t + ",v1=" + hex.EncodeToString(macSHA256([]byte(secret), []byte(t), []byte{'.'}, body))
}
