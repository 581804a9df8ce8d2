// Package endpoints is the table of the sluice NATS micro service's request
// subjects (docs/PROTOCOL.md "NATS"): <prefix>.v1.<endpoint>. The service
// registers them and the Go client sends to them; both read this table.
// (The owner subjects <prefix>.v1.quota.p.N and .m.ID belong to quota, the
// event subjects <prefix>.v1.events.* to events.)
package endpoints

import "strings"

// The endpoints, by the subject's tail after "<prefix>.v1.".
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

// Scoped lists the endpoints also served on a tenant-scoped subject (every
// endpoint but quota.reset, which is for operators).
var Scoped = []string{
	QuotaHit, QuotaReserve, QuotaRelease, QuotaCount,
	ClaimsSettle, ClaimsRelease, ClaimsGet,
	ReplayClaim,
	CooldownRecord, CooldownPenalize, CooldownLoad,
}

// ScopedPrefix is the subject prefix of a tenant's scoped endpoints,
// "<prefix>.v1.t.<token>." where token is the tenant as one subject token
// (the caller encodes it; "*" gives the service's subscription pattern).
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

// Name is the micro endpoint name of e ("quota.hit" -> "quota_hit").
func Name(e string) string { return strings.ReplaceAll(e, ".", "_") }
