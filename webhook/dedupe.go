package webhook

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/sluice-dev/sluice/internal/names"
)

// MaxKeyBytes is the longest dedupe (or replay) key used as is; a longer one
// is replaced by "sha256:<lowercase hex>" of it (the same rule as
// claims.NormalizeKey).
const MaxKeyBytes = names.MaxKey

// NormalizeKey returns key, or "sha256:<lowercase hex of SHA-256(key)>" when
// key is longer than MaxKeyBytes.
func NormalizeKey(key string) string { return names.NormalizeKey(key) }

// Dedupe presets and special specs accepted by ParseDedupe.
const (
	DedupeAuto     = "auto"
	DedupeNone     = "none"
	DedupeGitHub   = "github"            // X-GitHub-Delivery
	DedupeStandard = "standard_webhooks" // the signed id: webhook-id or svix-id
	DedupeSvix     = "svix"              // the same as standard_webhooks
	DedupeShopify  = "shopify"           // X-Shopify-Webhook-Id
	DedupeStripe   = "stripe"            // JSON "id"
	// DedupeHeaderPrefix introduces a header spec: "header:<Name>".
	DedupeHeaderPrefix = "header:"
	// DedupeJSONPrefix introduces a JSON path spec: "json:<dot.path>".
	DedupeJSONPrefix = "json:"
)

// HeaderIdempotencyKey is the generic idempotency header
// (draft-ietf-httpapi-idempotency-key-header): a key its sender picks per
// request, unlike a provider's event id (see Dedupe.Lookup).
const HeaderIdempotencyKey = "Idempotency-Key"

// autoHeaders are the headers an auto (unconfigured) Dedupe tries, in order;
// the first one present with a non-empty value gives the key.
var autoHeaders = []string{
	HeaderIdempotencyKey,
	"Webhook-Id",
	"X-Github-Delivery",
	"Svix-Id",
	"X-Shopify-Webhook-Id",
}

// Bounds of a json:<dot.path> spec.
const (
	maxDedupeSpecBytes = 512
	maxJSONPathSegs    = 32
)

type dedupeKind uint8

const (
	kindAuto dedupeKind = iota // the zero Dedupe
	kindNone
	kindHeader
	kindJSON
	kindStandard // webhook-id or svix-id, whichever family is signed
)

// Dedupe extracts a request's dedupe key according to a source's spec. The
// zero Dedupe is auto. A Dedupe is immutable and safe for concurrent use.
type Dedupe struct {
	kind   dedupeKind
	spec   string   // canonical spec, for String
	header string   // kindHeader: canonical header name; kindStandard: the unsigned fallback
	path   []string // kindJSON: object keys (or array indexes)
}

// ParseDedupe parses a dedupe spec, as docs/PROTOCOL.md ("Dedupe key")
// lists them: "auto" (or ""), "none", a preset (github, standard_webhooks,
// svix, shopify, stripe), "header:<Name>" (an HTTP token) or
// "json:<dot.path>" (object keys; a segment of decimal digits also indexes
// an array; a non-empty string or an integer literal, exactly, gives the
// key). A malformed spec is an error wrapping ErrInvalidDedupe naming it.
func ParseDedupe(spec string) (Dedupe, error) {
	switch spec {
	case "", DedupeAuto:
		return Dedupe{kind: kindAuto, spec: DedupeAuto}, nil
	case DedupeNone:
		return Dedupe{kind: kindNone, spec: DedupeNone}, nil
	case DedupeGitHub:
		return headerDedupe(spec, HeaderGitHubDelivery), nil
	case DedupeStandard:
		return Dedupe{kind: kindStandard, spec: spec, header: textproto.CanonicalMIMEHeaderKey(HeaderStandardID)}, nil
	case DedupeSvix:
		return Dedupe{kind: kindStandard, spec: spec, header: textproto.CanonicalMIMEHeaderKey(HeaderSvixID)}, nil
	case DedupeShopify:
		return headerDedupe(spec, "X-Shopify-Webhook-Id"), nil
	case DedupeStripe:
		return Dedupe{kind: kindJSON, spec: spec, path: []string{"id"}}, nil
	}
	if len(spec) > maxDedupeSpecBytes {
		return Dedupe{}, fmt.Errorf("%w %.32q…: longer than %d bytes", ErrInvalidDedupe, spec, maxDedupeSpecBytes)
	}
	if name, ok := strings.CutPrefix(spec, DedupeHeaderPrefix); ok {
		if !isToken(name) {
			return Dedupe{}, fmt.Errorf("%w %q: header name must be a non-empty HTTP token", ErrInvalidDedupe, spec)
		}
		return headerDedupe(spec, name), nil
	}
	if p, ok := strings.CutPrefix(spec, DedupeJSONPrefix); ok {
		path := strings.Split(p, ".")
		if len(path) > maxJSONPathSegs {
			return Dedupe{}, fmt.Errorf("%w %q: more than %d path segments", ErrInvalidDedupe, spec, maxJSONPathSegs)
		}
		for _, seg := range path {
			if seg == "" {
				return Dedupe{}, fmt.Errorf("%w %q: empty path segment", ErrInvalidDedupe, spec)
			}
		}
		return Dedupe{kind: kindJSON, spec: spec, path: path}, nil
	}
	return Dedupe{}, fmt.Errorf("%w %q (want auto, none, github, standard_webhooks, svix, shopify, stripe, header:<Name> or json:<dot.path>)", ErrInvalidDedupe, spec)
}

func headerDedupe(spec, name string) Dedupe {
	return Dedupe{kind: kindHeader, spec: spec, header: textproto.CanonicalMIMEHeaderKey(name)}
}

// MustParseDedupe is ParseDedupe for specs known to be valid (tests,
// constants); it panics on error.
func MustParseDedupe(spec string) Dedupe {
	d, err := ParseDedupe(spec)
	if err != nil {
		panic(err)
	}
	return d
}

// String returns the spec in canonical form ("auto" for the zero Dedupe).
func (d Dedupe) String() string {
	if d.spec == "" {
		return DedupeAuto
	}
	return d.spec
}

// MarshalText returns the canonical spec, so that a Dedupe prints as its spec
// in JSON and YAML.
func (d Dedupe) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// GoString returns the Go expression that builds d.
func (d Dedupe) GoString() string {
	return fmt.Sprintf("webhook.MustParseDedupe(%q)", d.String())
}

// IsNone reports whether d never yields a key.
func (d Dedupe) IsNone() bool { return d.kind == kindNone }

// Key returns the dedupe key of a request with headers h and raw body body,
// normalized with NormalizeKey; ok is false when there is none (absent or
// empty header, no usable JSON value, spec none). It never fails.
func (d Dedupe) Key(h http.Header, body []byte) (key string, ok bool) {
	key, _, ok = d.Lookup(h, body)
	return key, ok
}

// Lookup is Key, and also says whether the key is the request's
// Idempotency-Key header: one the sender picks for one request, so a reuse
// with another request is a conflict (the IETF draft's 422), not a
// duplicate. A provider's event id, re-sent with each retry, is not.
func (d Dedupe) Lookup(h http.Header, body []byte) (key string, idempotency, ok bool) {
	var k string
	switch d.kind {
	case kindNone:
		return "", false, false
	case kindHeader:
		k = h.Get(d.header)
		idempotency = d.header == HeaderIdempotencyKey
	case kindJSON:
		k, _ = jsonLookup(body, d.path)
	case kindStandard:
		id := d.header // unsigned: the preset's own header
		if len(h.Values(HeaderStandardSignature)) > 0 || len(h.Values(HeaderSvixSignature)) > 0 {
			id, _, _ = standardHeaders(h)
		}
		k = h.Get(id)
	default: // auto
		for _, name := range autoHeaders {
			if k = h.Get(name); k != "" {
				idempotency = name == HeaderIdempotencyKey
				break
			}
		}
	}
	if k == "" {
		return "", false, false
	}
	return NormalizeKey(k), idempotency, true
}

// isToken reports whether s is a non-empty RFC 9110 token (a valid header
// field name).
func isToken(s string) bool { return names.HTTPToken(s, 0) }
