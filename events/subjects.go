// Package events names sluice's event subjects, defines their JSON payloads,
// publishes lifecycle events, applies settle/release events published to a
// subject (the Settler), and reports claim expiry from the claims bucket's
// expiry markers (the ExpiryWatcher).
//
// Every user-supplied part of a subject (tenant, source) goes through
// kvstore.EncodeToken, so no input can add a token, become a wildcard or
// reach another tenant's subjects. Subjects is the one place that builds
// them.
package events

import (
	"fmt"
	"strings"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
)

// Claim lifecycle event names (the token after "claim." in a subject).
const (
	ClaimPending   = "pending"
	ClaimCommitted = "committed"
	ClaimReleased  = "released"
	ClaimExpired   = "expired"
	// ClaimSplit: an edge forwarding a hook found its dedupe key held on
	// the hub for another hook (accepted on both sides of a split).
	ClaimSplit = "split"
)

// Subjects builds every event subject for one prefix. The zero value is not
// usable: get one from NewSubjects. A Subjects is an immutable value, safe
// for concurrent use.
type Subjects struct {
	p string // validated prefix
}

// NewSubjects returns the subject builder for prefix, which must pass
// kvstore.ValidatePrefix (else the error wraps ErrInvalidOption).
func NewSubjects(prefix string) (Subjects, error) {
	if err := kvstore.ValidatePrefix(prefix); err != nil {
		return Subjects{}, fmt.Errorf("%w: %w", ErrInvalidOption, err)
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
	return s.p + ".v1.events.claim." + kvstore.Join(event, tenant)
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
	return s.p + ".v1.events.hook.stored." + kvstore.Join(tenant, source)
}

// LimitDenied is "<p>.v1.events.limit.denied.<tenant>".
func (s Subjects) LimitDenied(tenant string) string {
	return s.p + ".v1.events.limit.denied." + kvstore.EncodeToken(tenant)
}

// StoredHook is "<p>.hooks.<tenant>.<source>", the subject a webhook is
// stored under in the HOOKS stream (PROTOCOL.md, "Stored hook").
func (s Subjects) StoredHook(tenant, source string) string {
	return s.p + ".hooks." + kvstore.Join(tenant, source)
}

// StoredHooks is the wildcard "<p>.hooks.>" a HOOKS stream captures.
func (s Subjects) StoredHooks() string { return s.p + ".hooks.>" }

// StreamName is the name of the stream that captures the settle and release
// subjects of prefix: the prefix with '.' replaced by '_' (like
// kvstore.BucketNames), then "_events" ("sluice" -> "sluice_events"). Case is
// kept so that two prefixes differing only in case never share a stream.
func StreamName(prefix string) string {
	return strings.ReplaceAll(prefix, ".", "_") + "_events"
}

// SettleEvent is the payload of the settle and release subjects, the same
// fields as the request forms sluice.v1.claims.settle / .release.
type SettleEvent struct {
	Tenant   string `json:"tenant"`
	Source   string `json:"source"`
	Key      string `json:"key"`
	HookID   string `json:"hook_id"`
	Revision uint64 `json:"revision"`
}

// ID is the claim the event names.
func (e SettleEvent) ID() claims.ID {
	return claims.ID{Tenant: e.Tenant, Source: e.Source, Key: e.Key}
}

// Validate checks the event: a valid claims.ID, a non-empty hook id and a
// revision > 0. Errors wrap claims.ErrInvalid (the publisher's fault: such an
// event is never retried).
func (e SettleEvent) Validate() error {
	if err := e.ID().Validate(); err != nil {
		return err
	}
	switch {
	case e.HookID == "":
		return fmt.Errorf("%w: hook_id must not be empty", claims.ErrInvalid)
	case e.Revision == 0:
		return fmt.Errorf("%w: revision must be > 0", claims.ErrInvalid)
	}
	return nil
}

// Lifecycle is the payload of every lifecycle event (claim.*, hook.stored,
// limit.denied). Tenant, source, key, hook_id and at are always present
// (empty strings where they do not apply, e.g. hook_id of an expired claim
// or key of a denied hit); the rest only when set.
//
// Key is the stored form of the dedupe key (claims.NormalizeKey): what the
// claims bucket holds, so pending and expired events of one claim carry the
// same key.
type Lifecycle struct {
	Tenant string `json:"tenant"`
	Source string `json:"source"`
	Key    string `json:"key"`
	HookID string `json:"hook_id"`
	// At is when the event happened on the publishing node (UTC; encoded in
	// RFC 3339 with nanoseconds). For expired, when the expiry was observed.
	At time.Time `json:"at"`
	// Revision of the claim (pending, committed, released), when known.
	Revision uint64 `json:"revision,omitempty"`
	// Kind of the denied charge ("hooks", "bytes") for limit.denied.
	Kind string `json:"kind,omitempty"`
	// RetryAfterMs is the sender's wait for limit.denied, in milliseconds.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Reason is a short machine-readable cause, when there is one.
	Reason string `json:"reason,omitempty"`
	// HubHookID is, for claim.split, the hook the hub's side accepted for
	// the key (HookID is the edge's).
	HubHookID string `json:"hub_hook_id,omitempty"`
}
