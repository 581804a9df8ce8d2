package quota

import (
	"errors"

	"github.com/sluice-dev/sluice/quota/internal/lease"
)

// Errors.
var (
	// ErrUnavailable: the partition owner did not answer within the call's
	// budget (timeout, no responders after retries, handoff in progress).
	// A value, never a panic: callers fall back to node-local state.
	ErrUnavailable = errors.New("quota: unavailable")
	// ErrInvalid: the request is malformed (the caller's fault; answer 400).
	ErrInvalid = errors.New("quota: invalid request")
	// ErrPartitionMismatch: the fleet was created with another partition
	// count; a node configured differently refuses to start.
	ErrPartitionMismatch = lease.ErrPartitionMismatch
)

// Charge kinds used by the edge.
const (
	KindHooks = "hooks"
	KindBytes = "bytes"
)

// Charge is one GCRA charge: Increment µs of the (Kind, Tenant) bucket whose
// capacity (burst tolerance) is Capacity µs.
type Charge struct {
	Kind        string `json:"kind"`
	Tenant      string `json:"tenant"`
	IncrementUs int64  `json:"increment_us"`
	CapacityUs  int64  `json:"capacity_us"`
}

// ClaimRequest asks the owner to take a pending dedupe claim in the same
// round trip as the charges.
type ClaimRequest struct {
	Tenant       string `json:"tenant"`
	Source       string `json:"source"`
	Key          string `json:"key"`
	HookID       string `json:"hook_id"`
	TTLMs        int64  `json:"ttl_ms,omitempty"`
	PendingTTLMs int64  `json:"pending_ttl_ms,omitempty"`
}

// SettleRequest commits the pending claim a hit took (Client.Settle): the
// claims.settle of PROTOCOL.md, sent to the tenant's partition owner.
type SettleRequest struct {
	Tenant   string
	Source   string
	Key      string
	HookID   string
	Revision uint64 // the hit's reply's revision
	// TTLMs is how long the committed claim is kept (0: the owner's
	// default, the node's --dedupe-ttl).
	TTLMs int64
}

// HitRequest is the body of sluice.v1.quota.hit.
type HitRequest struct {
	Charges []Charge      `json:"charges"`
	Claim   *ClaimRequest `json:"claim"`
}

// Hit results.
const (
	ResultOK          = "ok"
	ResultDuplicate   = "duplicate"
	ResultPending     = "pending"
	ResultRateLimited = "rate_limited"
)

// LimitState reports one charge's bucket after the decision, for the HTTP
// RateLimit headers (an extension of PROTOCOL.md's reply).
type LimitState struct {
	Kind         string `json:"kind"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_ms"`
}

// HitReply is the reply of sluice.v1.quota.hit.
type HitReply struct {
	Result       string       `json:"result"`
	HookID       string       `json:"hook_id,omitempty"`
	RetryAfterMs int64        `json:"retry_after_ms,omitempty"`
	Revision     uint64       `json:"revision,omitempty"`
	Limits       []LimitState `json:"limits,omitempty"`
	// Local is set (never on the wire) when the charges were decided from
	// node-local fallback state (the owner did not answer in time). The
	// claim, if any, still lives in the fleet's claim store.
	Local bool `json:"-"`
}

// Tenant is the tenant that routes the request (the claim's or the first
// charge's).
func (r *HitRequest) Tenant() string {
	if r.Claim != nil {
		return r.Claim.Tenant
	}
	if len(r.Charges) > 0 {
		return r.Charges[0].Tenant
	}
	return ""
}

// ReserveRequest is the body of sluice.v1.quota.reserve.
type ReserveRequest struct {
	Principal string `json:"principal"`
	Key       string `json:"key"`
	Max       int64  `json:"max"`
	TTLMs     int64  `json:"ttl_ms,omitempty"`
	// RequestID names the slot (optional): a reserve retried with the same
	// id gets the same grant rather than a second slot, and renews the
	// slot, which frees ttl_ms after its last reserve (its own TTL, not
	// the counter's). Release it with the same id.
	RequestID string `json:"request_id,omitempty"`
}

// ReserveReply: granted → count after the increment; denied → the count
// that blocked it.
type ReserveReply struct {
	Granted bool  `json:"granted"`
	Count   int64 `json:"count"`
}

// CounterRequest is the body of sluice.v1.quota.release and .count.
type CounterRequest struct {
	Principal string `json:"principal"`
	Key       string `json:"key"`
	// RequestID (release only, optional) releases the slot a reserve named:
	// a release retried with the same id releases nothing more.
	RequestID string `json:"request_id,omitempty"`
}

// CountReply is the reply of release and count.
type CountReply struct {
	Count int64 `json:"count"`
}

// ResetRequest is the body of sluice.v1.quota.reset.
type ResetRequest struct {
	Tenant string `json:"tenant"`
}
