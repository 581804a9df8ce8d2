package protocol

import (
	"fmt"
	"time"
)

// SettleEvent is the payload of the settle and release subjects, the same
// fields as the request forms sluice.v1.claims.settle / .release.
type SettleEvent struct {
	Tenant   string `json:"tenant"`
	Source   string `json:"source"`
	Key      string `json:"key"`
	HookID   string `json:"hook_id"`
	Revision uint64 `json:"revision"`
}

// Validate checks the event: a valid claim id (ValidateClaimID), a
// non-empty hook id and a revision > 0. Errors wrap ErrInvalid (the
// publisher's fault: such an event is never retried).
func (e SettleEvent) Validate() error {
	if err := ValidateClaimID(e.Tenant, e.Source, e.Key); err != nil {
		return err
	}
	switch {
	case e.HookID == "":
		return fmt.Errorf("%w: hook_id must not be empty", ErrInvalid)
	case e.Revision == 0:
		return fmt.Errorf("%w: revision must be > 0", ErrInvalid)
	}
	return nil
}

// Lifecycle is the payload of every lifecycle event (claim.*, hook.stored,
// limit.denied). Tenant, source, key, hook_id and at are always present
// (empty where they do not apply); the rest only when set. Key is the
// stored form of the dedupe key (what the claims bucket holds), so the
// events of one claim carry the same key.
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
