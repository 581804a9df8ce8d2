package webhook

import (
	"fmt"
	"slices"
	"strings"
)

// Preset names (Preset).
const (
	PresetGitHub   = "github"            // X-Hub-Signature-256: sha256=<hex HMAC-SHA256(body)>
	PresetStripe   = "stripe"            // Stripe-Signature: t=<ts>,v1=<hex HMAC-SHA256("<ts>.<body>")>
	PresetStandard = "standard_webhooks" // webhook-signature: v1,<base64 HMAC-SHA256("<id>.<ts>.<body>")>, svix-* accepted
	PresetSvix     = "svix"              // the Standard Webhooks scheme under svix-id, svix-timestamp, svix-signature
	PresetShopify  = "shopify"           // X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256(body)>
	PresetSlack    = "slack"             // X-Slack-Signature: v0=<hex HMAC-SHA256("v0:<ts>:<body>")>
	PresetTwilio   = "twilio"            // X-Twilio-Signature: <base64 HMAC-SHA1(url + sorted form params)>; needs URL
	PresetLinear   = "linear"            // Linear-Signature: <hex HMAC-SHA256(body)>
	PresetGitLab   = "gitlab"            // X-Gitlab-Token: <secret>
	PresetAPIKey   = "api_key"           // X-API-Key: <secret> (any header: set Header)
	PresetBasic    = "basic"             // Authorization: Basic base64(<user:password>)
)

// presets are the known providers' schemes, by name.
var presets = map[string]Scheme{
	PresetGitHub: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: HeaderGitHubSignature, Format: FormatSingle, Prefix: "sha256=", Encoding: EncodingHex,
		Signed: PartBody, IDHeader: HeaderGitHubDelivery,
		// GitHub lets users pick the secret: any non-empty one is kept
		// working.
		MinSecretBytes: 1,
	},
	PresetStripe: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: HeaderStripeSignature, Format: FormatKV, TimestampKey: "t", SignatureKey: "v1", Encoding: EncodingHex,
		Signed: "{timestamp}.{body}", Tolerance: DefaultTolerance, IDJSON: "id",
		// The whole "whsec_…" string is the key; configurations that
		// predate the declarative form used any non-empty secret.
		MinSecretBytes: 1,
	},
	PresetStandard: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: HeaderStandardSignature, Format: FormatList, Separator: " ", Prefix: "v1,", Encoding: EncodingBase64,
		Signed: "{id}.{timestamp}.{body}", IDHeader: HeaderStandardID, TimestampHeader: HeaderStandardTimestamp,
		Tolerance: DefaultTolerance, SecretEncoding: SecretWhsec, MinSecretBytes: MinStandardKeyBytes,
		Fallback: &HeaderNames{Header: HeaderSvixSignature, TimestampHeader: HeaderSvixTimestamp, IDHeader: HeaderSvixID},
	},
	PresetSvix: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: HeaderSvixSignature, Format: FormatList, Separator: " ", Prefix: "v1,", Encoding: EncodingBase64,
		Signed: "{id}.{timestamp}.{body}", IDHeader: HeaderSvixID, TimestampHeader: HeaderSvixTimestamp,
		Tolerance: DefaultTolerance, SecretEncoding: SecretWhsec, MinSecretBytes: MinStandardKeyBytes,
	},
	PresetShopify: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: "X-Shopify-Hmac-Sha256", Format: FormatSingle, Encoding: EncodingBase64,
		Signed: PartBody, IDHeader: "X-Shopify-Webhook-Id",
	},
	PresetSlack: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: "X-Slack-Signature", Format: FormatSingle, Prefix: "v0=", Encoding: EncodingHex,
		Signed: "v0:{timestamp}:{body}", TimestampHeader: "X-Slack-Request-Timestamp", Tolerance: DefaultTolerance,
	},
	PresetTwilio: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA1,
		Header: "X-Twilio-Signature", Format: FormatSingle, Encoding: EncodingBase64,
		Signed: "{url}{form}",
		// URL is the source's public URL, set by the configuration.
	},
	PresetLinear: {
		Type: SchemeHMAC, Algorithm: AlgHMACSHA256,
		Header: "Linear-Signature", Format: FormatSingle, Encoding: EncodingHex,
		Signed: PartBody, IDHeader: "Linear-Delivery",
	},
	PresetGitLab: {Type: SchemeToken, Header: "X-Gitlab-Token"},
	PresetAPIKey: {Type: SchemeToken, Header: "X-API-Key"},
	PresetBasic:  {Type: SchemeBasic},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Preset returns the scheme called name (one of Presets), with Name set; a
// caller may adjust it (Twilio's URL, an API key's header) before
// NewSchemeVerifier validates it. An unknown name is an error wrapping
// ErrUnknownVerifier.
func Preset(name string) (Scheme, error) {
	s, ok := presets[name]
	if !ok {
		return Scheme{}, fmt.Errorf("%w %q (want one of %s)", ErrUnknownVerifier, name, strings.Join(Presets(), ", "))
	}
	s.Name = name
	s.Fallback = s.Fallback.clone()
	return s, nil
}

// newPreset returns the verifier of preset name (which must exist) with
// secret.
func newPreset(name, secret string) (*SchemeVerifier, error) {
	s, err := Preset(name)
	if err != nil {
		return nil, err
	}
	return NewSchemeVerifier(s, secret)
}

// resolve returns s completed from its preset: a Scheme with a Name and no
// Type is that preset (ErrUnknownVerifier when there is none) with every
// field s sets overriding it; a Scheme with a Type is complete already.
func resolve(s Scheme) (Scheme, error) {
	if s.Type != "" || s.Name == "" {
		return s, nil // without either, compile reports the missing type
	}
	p, err := Preset(s.Name)
	if err != nil {
		return Scheme{}, err
	}
	for _, f := range []struct{ dst, src *string }{
		{&p.Header, &s.Header}, {&p.Prefix, &s.Prefix}, {&p.Format, &s.Format}, {&p.Separator, &s.Separator},
		{&p.SignatureKey, &s.SignatureKey}, {&p.TimestampKey, &s.TimestampKey}, {&p.Encoding, &s.Encoding},
		{&p.Algorithm, &s.Algorithm}, {&p.Signed, &s.Signed}, {&p.TimestampHeader, &s.TimestampHeader},
		{&p.IDHeader, &s.IDHeader}, {&p.IDJSON, &s.IDJSON}, {&p.URL, &s.URL}, {&p.SecretEncoding, &s.SecretEncoding},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	if s.Tolerance != 0 {
		p.Tolerance = s.Tolerance
	}
	if s.MinSecretBytes != 0 {
		p.MinSecretBytes = s.MinSecretBytes
	}
	if s.Fallback != nil {
		p.Fallback = s.Fallback.clone()
	}
	return p, nil
}
