// Package httpapi is sluice's HTTP webhook ingress: it verifies, rate limits,
// dedupes and durably stores webhooks, never answering 2xx for a hook that
// JetStream has not acknowledged, and serves the operator endpoints and the
// admin API. No global state, no fx: mount New's Handler on any http.Server.
package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/netip"
	"time"

	"github.com/sluice-dev/sluice/internal/limits"
	"github.com/sluice-dev/sluice/protocol"
)

// ErrUnknownSource is returned by a Policy for a tenant/source pair that the
// configuration does not allow (404 unknown_source).
var ErrUnknownSource = errors.New("httpapi: unknown source")

// ErrSourceUnavailable is returned by a Policy for a source that exists but
// cannot be served on this node (e.g. its secret does not open here): 503
// source_unavailable, never an unverified accept.
var ErrSourceUnavailable = errors.New("httpapi: source unavailable")

// AdminRoute is an admin API route served behind the admin token (see
// Config.AdminRoutes). Op names it in the metric (a fixed value).
type AdminRoute struct {
	Pattern string // net/http pattern, e.g. "GET /v1/admin/tenants/{tenant}"
	Op      string
	Handler http.HandlerFunc
}

// Verified is what a successful signature check yields for the replay claim.
type Verified struct {
	// MessageID is the provider's message id ("" when the provider has none).
	MessageID string
	// Timestamp is the signed Unix time (0 when the provider signs none).
	Timestamp int64
	// Tolerance is the accepted clock skew around Timestamp.
	Tolerance time.Duration
	// BodySigned is true when the signature covers the body: only then is
	// a source without a signed timestamp deduped on the body (ContentKey).
	BodySigned bool
}

// Source is the effective configuration of one tenant/source pair.
type Source struct {
	// Dedupe extracts the dedupe key (ok=false: no key, no dedupe);
	// idempotency is true for the sender's per-request Idempotency-Key
	// (webhook.Dedupe.Lookup): its claim keeps the body's digest, and the
	// key reused with another body is 422, not a duplicate.
	Dedupe func(h http.Header, body []byte) (key string, idempotency, ok bool)
	// Verify checks the request's signature; nil means no verification.
	// Any error is answered 401 verification_failed.
	Verify func(h http.Header, body []byte, now time.Time) (Verified, error)
	// MaxBodyBytes bounds the body (413 beyond it).
	MaxBodyBytes int64
	// Methods the source accepts (nil: POST), ContentTypes (media types
	// without parameters, "type/*" for a whole type; nil: any) and IPAllow
	// (client prefixes; nil: any). Refused with 405, 415 and 403 before
	// the body is read, charged or claimed.
	Methods      []string
	ContentTypes []string
	IPAllow      []netip.Prefix
	// CRC, when set, makes the source answer GET ?crc_token=T with
	// {"response_token": CRC(T)} (Twitter-style), and refuse bodies a CRC
	// token could be (the answer would sign them). ok=false: 503.
	CRC func(token string) (response string, ok bool)
	// URLVerification makes the source answer a verified POST
	// {"type":"url_verification","challenge":C} with {"challenge":C}
	// (Slack) instead of storing it.
	URLVerification bool
	// EventType, when set, returns the request's event type ("" when
	// absent): the source's hooks are then stored under
	// protocol.TypedHookSubject. nil: protocol.HookSubject (no type token).
	EventType func(h http.Header, body []byte) string
	// Limits, when set, are the source's own budgets, charged instead of
	// its tenant's (under the kinds SourceKind names): the source neither
	// spends nor is starved by the tenant's budget.
	Limits *Limits
}

// SourceKind is the charge kind of a source's own budget of kind base
// ("hooks" or "bytes"): base@source, or base@#<hash> when that would exceed
// protocol.MaxKindBytes. Kinds of different sources never collide.
func SourceKind(base, source string) string {
	k := base + "@" + source
	if len(k) <= protocol.MaxKindBytes {
		return k
	}
	sum := sha256.Sum256([]byte(source))
	return base + "@#" + hex.EncodeToString(sum[:16])
}

// Policy resolves a tenant/source pair to its configuration.
type Policy interface {
	// Source returns the pair's configuration, or ErrUnknownSource.
	Source(tenant, source string) (Source, error)
}

// Rate is a GCRA rate: Rate units per second with a burst of Burst units
// (the same type as config.Rate: one rule, Rate.Validate, for a valid one).
type Rate = limits.Rate

// Limits are a tenant's budgets: hooks per second and body bytes per second
// (the same type as config.Limits).
type Limits = limits.Limits

// Limit origins reported by the admin API.
const (
	OriginOverride = "override"
	OriginTenant   = "tenant"
	OriginDefault  = "default"
)

// LimitsFunc returns the configured limits of a tenant and their origin
// (OriginTenant or OriginDefault); fleet-wide overrides are layered on top by
// the Handler.
type LimitsFunc func(tenant string) (Limits, string)

// Admitter decides a hit: charges plus an optional pending claim, in one
// round trip (quota.Fleet implements it).
type Admitter interface {
	Hit(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error)
}

// Resetter forgets a tenant's rate-limit buckets fleet-wide (quota.Router
// and quota.Fleet implement it).
type Resetter interface {
	Reset(ctx context.Context, tenant string) error
}
