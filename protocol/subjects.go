package protocol

import (
	"fmt"
	"strings"
)

// The endpoints of the sluice NATS micro service (docs/PROTOCOL.md
// "NATS"), by the subject's tail after "<prefix>.v1.". The service
// registers them and the Go client sends to them. (The owner subjects
// <prefix>.v1.quota.p.N and .m.ID are not public: they belong to quota.)
const (
	QuotaHit     = "quota.hit"
	QuotaReset   = "quota.reset"
	QuotaReserve = "quota.reserve"
	QuotaRelease = "quota.release"
	QuotaCount   = "quota.count"

	ClaimsSettle  = "claims.settle"
	ClaimsRelease = "claims.release"
	ClaimsGet     = "claims.get"

	ReplayClaim = "replay.claim"

	CooldownRecord   = "cooldown.record"
	CooldownPenalize = "cooldown.penalize"
	CooldownLoad     = "cooldown.load"
)

// Subject is the request subject of endpoint e under prefix.
func Subject(prefix, e string) string { return prefix + ".v1." + e }

// Scoped returns the endpoints also served on a tenant-scoped subject (every
// endpoint but quota.reset, which is for operators).
func Scoped() []string {
	return []string{
		QuotaHit, QuotaReserve, QuotaRelease, QuotaCount,
		ClaimsSettle, ClaimsRelease, ClaimsGet,
		ReplayClaim,
		CooldownRecord, CooldownPenalize, CooldownLoad,
	}
}

// ScopedPrefix is the subject prefix of a tenant's scoped endpoints,
// "<prefix>.v1.t.<token>." where token is the tenant as one subject token
// (TenantToken; "*" gives the service's subscription pattern).
func ScopedPrefix(prefix, token string) string { return prefix + ".v1.t." + token + "." }

// ScopedSubject is the tenant-scoped subject of e:
// "<prefix>.v1.t.<token>.<endpoint>".
func ScopedSubject(prefix, token, e string) string { return ScopedPrefix(prefix, token) + e }

// ScopedToken returns the tenant token of a scoped subject under prefix
// (ok false when subject is not one).
func ScopedToken(prefix, subject string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, prefix+".v1.t.")
	if !ok {
		return "", false
	}
	tok, _, ok := strings.Cut(rest, ".")
	return tok, ok && tok != ""
}

// EndpointName is the micro endpoint name of e ("quota.hit" -> "quota_hit").
func EndpointName(e string) string { return strings.ReplaceAll(e, ".", "_") }

// Claim lifecycle event names (the token after "claim." in a subject).
const (
	ClaimPending   = "pending"
	ClaimCommitted = "committed"
	ClaimReleased  = "released"
	ClaimExpired   = "expired"
	// ClaimSplit: a leaf forwarding a hook found its dedupe key held on
	// the hub for another hook (accepted on both sides of a split).
	ClaimSplit = "split"
)

// Subjects builds every event subject for one prefix. Every user-supplied
// part of a subject (tenant, source) goes through EncodeToken, so no input
// can add a token, become a wildcard or reach another tenant's subjects.
// The zero value is not usable: get one from NewSubjects. A Subjects is an
// immutable value, safe for concurrent use.
type Subjects struct {
	p string // validated prefix
}

// NewSubjects returns the subject builder for prefix, which must pass
// ValidatePrefix (else the error wraps ErrInvalid).
func NewSubjects(prefix string) (Subjects, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return Subjects{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Subjects{p: prefix}, nil
}

// Prefix is the subject prefix the builder was made for.
func (s Subjects) Prefix() string { return s.p }

// Settle is "<p>.v1.events.settle": publish a SettleEvent here to settle
// (commit) a pending claim.
func (s Subjects) Settle() string { return s.p + ".v1.events.settle" }

// Release is "<p>.v1.events.release": publish a SettleEvent here to release
// a claim.
func (s Subjects) Release() string { return s.p + ".v1.events.release" }

// Events is the wildcard "<p>.v1.events.>" matching every event subject,
// settle and release requests included.
func (s Subjects) Events() string { return s.p + ".v1.events.>" }

// ClaimEvents is the wildcard "<p>.v1.events.claim.>" matching every claim
// lifecycle event of every tenant.
func (s Subjects) ClaimEvents() string { return s.p + ".v1.events.claim.>" }

// Claim is "<p>.v1.events.claim.<event>.<tenant>" with the tenant encoded.
// event must be one of ClaimPending, ClaimCommitted, ClaimReleased,
// ClaimExpired and ClaimSplit; any other value is encoded like a user part (so the result
// still has exactly one token for it) but no sluice component publishes it.
func (s Subjects) Claim(event, tenant string) string {
	return s.p + ".v1.events.claim." + Join(event, tenant)
}

// ClaimPending is "<p>.v1.events.claim.pending.<tenant>".
func (s Subjects) ClaimPending(tenant string) string { return s.Claim(ClaimPending, tenant) }

// ClaimCommitted is "<p>.v1.events.claim.committed.<tenant>".
func (s Subjects) ClaimCommitted(tenant string) string { return s.Claim(ClaimCommitted, tenant) }

// ClaimReleased is "<p>.v1.events.claim.released.<tenant>".
func (s Subjects) ClaimReleased(tenant string) string { return s.Claim(ClaimReleased, tenant) }

// ClaimExpired is "<p>.v1.events.claim.expired.<tenant>".
func (s Subjects) ClaimExpired(tenant string) string { return s.Claim(ClaimExpired, tenant) }

// ClaimSplit is "<p>.v1.events.claim.split.<tenant>".
func (s Subjects) ClaimSplit(tenant string) string { return s.Claim(ClaimSplit, tenant) }

// HookStored is "<p>.v1.events.hook.stored.<tenant>.<source>".
func (s Subjects) HookStored(tenant, source string) string {
	return s.p + ".v1.events.hook.stored." + Join(tenant, source)
}

// LimitDenied is "<p>.v1.events.limit.denied.<tenant>".
func (s Subjects) LimitDenied(tenant string) string {
	return s.p + ".v1.events.limit.denied." + EncodeToken(tenant)
}
