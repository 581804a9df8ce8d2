package protocol

import (
	"fmt"
	"time"
	"unicode/utf8"
)

// MaxHookIDBytes bounds a hook id.
const MaxHookIDBytes = 256

// ValidateClaimID checks the parts of a dedupe claim's id: tenant and
// source 1..MaxNameBytes bytes, key non-empty. Any bytes are allowed: the
// key codec makes them safe. The error wraps ErrInvalid.
func ValidateClaimID(tenant, source, key string) error {
	switch {
	case tenant == "" || len(tenant) > MaxNameBytes:
		return fmt.Errorf("%w: tenant must be 1..%d bytes", ErrInvalid, MaxNameBytes)
	case source == "" || len(source) > MaxNameBytes:
		return fmt.Errorf("%w: source must be 1..%d bytes", ErrInvalid, MaxNameBytes)
	case key == "":
		return fmt.Errorf("%w: key must not be empty", ErrInvalid)
	}
	return nil
}

// ValidateHookID checks a hook id: 1..MaxHookIDBytes bytes of valid UTF-8
// (the id is stored in a JSON value and must read back byte for byte).
// The error wraps ErrInvalid.
func ValidateHookID(hookID string) error {
	switch {
	case hookID == "" || len(hookID) > MaxHookIDBytes:
		return fmt.Errorf("%w: hook id must be 1..%d bytes", ErrInvalid, MaxHookIDBytes)
	case !utf8.ValidString(hookID):
		return fmt.Errorf("%w: hook id must be valid UTF-8", ErrInvalid)
	}
	return nil
}

// ClaimsRequest is the body of claims.settle, claims.release and (tenant,
// source and key only) claims.get as the Go client encodes it; empty
// members are left out. The service decodes a body in exactly this
// encoding on its fast path (service/fastdecode.go).
type ClaimsRequest struct {
	Tenant   string `json:"tenant"`
	Source   string `json:"source"`
	Key      string `json:"key"`
	HookID   string `json:"hook_id,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// TTLMs is the settle extension: how long the committed claim is kept
	// (absent: the service's --dedupe-ttl).
	TTLMs int64 `json:"ttl_ms,omitempty"`
}

// Claim state names: the "state" of a ClaimState.
const (
	StatePending   = "pending"
	StateCommitted = "committed"
	StateAbsent    = "absent"
)

// ClaimState is the reply of <prefix>.v1.claims.get: a dedupe claim as the
// fleet's claims store holds it.
type ClaimState struct {
	// State is StatePending, StateCommitted or StateAbsent (then HookID is
	// "" and the numbers are 0).
	State string `json:"state"`
	// HookID is the holder's hook id.
	HookID string `json:"hook_id"`
	// Revision is what claims.settle and claims.release must present.
	Revision uint64 `json:"revision"`
	// ExpiresInMs is the time left until the claim expires, in whole
	// milliseconds rounded up (a live claim is never 0).
	ExpiresInMs int64 `json:"expires_in_ms"`
}

// ExpiresIn is ExpiresInMs as a duration.
func (s ClaimState) ExpiresIn() time.Duration {
	return time.Duration(s.ExpiresInMs) * time.Millisecond
}

// ReplayOutcome of a replay claim.
type ReplayOutcome int

const (
	// Claimed: the (namespace, key) pair was new and is now held.
	Claimed ReplayOutcome = iota + 1
	// AlreadyClaimed: the pair was seen before (a replay).
	AlreadyClaimed
	// Full: the pair is new but the store is at capacity.
	Full
)

// String is the outcome's wire name: "claimed", "already_claimed" or
// "full".
func (o ReplayOutcome) String() string {
	if names := [...]string{"claimed", "already_claimed", "full"}; o >= 1 && int(o) <= len(names) {
		return names[o-1]
	}
	return fmt.Sprintf("ReplayOutcome(%d)", int(o))
}

// MaxRetainUntil is the latest retain_until of a replay claim (Unix
// seconds): 9999-12-31T23:59:59Z.
const MaxRetainUntil = 253402300799

// ReplayRequest is the body of sluice.v1.replay.claim as the Go client
// sends it. RetainUntil is always sent: 0 is a valid instant.
type ReplayRequest struct {
	Namespace   string `json:"namespace"`
	Key         string `json:"key"`
	RetainUntil int64  `json:"retain_until"`
}

// ReplayReply is the reply of sluice.v1.replay.claim: Result is a
// ReplayOutcome's String.
type ReplayReply struct {
	Result string `json:"result"`
}

// ValidateReplay checks a replay claim's arguments: namespace and key
// 1..MaxNameBytes bytes, retainUntil in 0..MaxRetainUntil (Unix seconds).
// The error wraps ErrInvalid.
func ValidateReplay(namespace, key string, retainUntil int64) error {
	switch {
	case namespace == "" || len(namespace) > MaxNameBytes:
		return fmt.Errorf("%w: namespace must be 1..%d bytes", ErrInvalid, MaxNameBytes)
	case key == "" || len(key) > MaxNameBytes:
		return fmt.Errorf("%w: key must be 1..%d bytes", ErrInvalid, MaxNameBytes)
	case retainUntil < 0 || retainUntil > MaxRetainUntil:
		return fmt.Errorf("%w: retain_until must be in 0..%d", ErrInvalid, int64(MaxRetainUntil))
	}
	return nil
}
