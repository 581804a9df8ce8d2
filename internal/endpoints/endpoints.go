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

// Name is the micro endpoint name of e ("quota.hit" -> "quota_hit").
func Name(e string) string { return strings.ReplaceAll(e, ".", "_") }
