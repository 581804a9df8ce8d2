package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// MaxEventTypeBytes bounds an event type: a longer one is replaced by
// "sha256:<32 hex>" of it (so a subject token stays bounded).
const MaxEventTypeBytes = 64

// Event type presets (ParseEventType): where known providers put the type.
var eventTypePresets = map[string]string{
	"github":            "header:X-GitHub-Event",
	"gitlab":            "header:X-Gitlab-Event",
	"shopify":           "header:X-Shopify-Topic",
	"stripe":            "json:type",
	"standard_webhooks": "json:type",
	"svix":              "json:type",
	"linear":            "header:Linear-Event",
}

// EventType says where a source's requests carry their event type. The
// zero EventType is "not set": the source's hooks are stored without a
// type token.
type EventType struct {
	spec   string
	header string   // canonical header name, or
	path   []string // a JSON dot path
}

// ParseEventType parses an event_type spec: "" (not set), header:<Name>,
// json:<dot.path>, or a preset (github, gitlab, shopify, stripe,
// standard_webhooks, svix, linear). Errors wrap ErrInvalidEventType.
func ParseEventType(spec string) (EventType, error) {
	if spec == "" {
		return EventType{}, nil
	}
	if p, ok := eventTypePresets[spec]; ok {
		e, err := ParseEventType(p)
		e.spec = spec
		return e, err
	}
	if len(spec) > maxDedupeSpecBytes {
		return EventType{}, fmt.Errorf("%w %.32q…: longer than %d bytes", ErrInvalidEventType, spec, maxDedupeSpecBytes)
	}
	if name, ok := strings.CutPrefix(spec, DedupeHeaderPrefix); ok {
		if !isToken(name) {
			return EventType{}, fmt.Errorf("%w %q: header name must be a non-empty HTTP token", ErrInvalidEventType, spec)
		}
		return EventType{spec: spec, header: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	if p, ok := strings.CutPrefix(spec, DedupeJSONPrefix); ok {
		path := strings.Split(p, ".")
		if len(path) > maxJSONPathSegs || p == "" {
			return EventType{}, fmt.Errorf("%w %q: 1..%d path segments", ErrInvalidEventType, spec, maxJSONPathSegs)
		}
		for _, seg := range path {
			if seg == "" {
				return EventType{}, fmt.Errorf("%w %q: empty path segment", ErrInvalidEventType, spec)
			}
		}
		return EventType{spec: spec, path: path}, nil
	}
	return EventType{}, fmt.Errorf("%w %q (want header:<Name>, json:<dot.path> or one of github, gitlab, shopify, stripe, standard_webhooks, svix, linear)", ErrInvalidEventType, spec)
}

// ErrInvalidEventType is returned by ParseEventType for a malformed spec.
var ErrInvalidEventType = errors.New("webhook: invalid event_type spec")

// IsSet reports whether the source names where its event type is.
func (e EventType) IsSet() bool { return e.spec != "" }

// String returns the spec ("" when not set).
func (e EventType) String() string { return e.spec }

// Type returns the request's event type: the header's value or the JSON
// body's scalar at the path; "" when absent. A type longer than
// MaxEventTypeBytes is "sha256:<32 lowercase hex>" of it.
func (e EventType) Type(h http.Header, body []byte) string {
	var t string
	switch {
	case e.header != "":
		t = h.Get(e.header)
	case e.path != nil:
		t, _ = jsonLookup(body, e.path)
	}
	if len(t) > MaxEventTypeBytes {
		sum := sha256.Sum256([]byte(t))
		t = "sha256:" + hex.EncodeToString(sum[:16])
	}
	return t
}
