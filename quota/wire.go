package quota

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// The owner protocol: JSON requests on partitionSubject(prefix, n), answered
// by the worker holding partition n's lease. It is internal to sluice
// (clients in other languages use the sluice.v1.quota.* service): unknown
// fields are ignored, an unknown op is a 400.
//
//	{"op":"hit","timeout_ms":N,"hit":{…HitRequest}}          -> HitReply
//	{"op":"reset","reset":{"tenant":"t"}}                      -> {"ok":true}
//	{"op":"reserve","reserve":{…ReserveRequest}}               -> ReserveReply
//	{"op":"release"|"count","counter":{…CounterRequest}}       -> CountReply
//
// timeout_ms is what is left of the caller's budget; the owner bounds its KV
// calls for the request by it. Errors carry the micro headers
// Nats-Service-Error-Code (400 or 503) and Nats-Service-Error (the reason)
// and an empty body. The reason "not_owner" (503) means the receiver is
// handing the partition over: the client retries like on no-responders.
//
// "op":"batch" is the binary batch frame of quota/internal/frame (first byte 0xFA, so
// never mistaken for JSON): several hits, possibly of several partitions
// the receiving worker serves, answered item by item in one reply (plus
// one for the items that waited on a claim). Owners also serve frames on
// their member subject (memberSubject), which their replies advertise.
// Clients coalesce concurrent hits into frames (internal/coalesce); a hit
// goes as JSON with WithCoalescing(false) or when it does not fit a frame.
//
// quota/owner serves the protocol; its names are exported for it.
const (
	OpHit     = "hit"
	OpReset   = "reset"
	OpReserve = "reserve"
	OpRelease = "release"
	OpCount   = "count"
)

// ReasonNotOwner is the 503 reason of a receiver that no longer holds (or
// is releasing) the partition.
const ReasonNotOwner = frame.ReasonNotOwner

// OwnerRequest is a JSON request of the owner protocol.
type OwnerRequest struct {
	Op        string                   `json:"op"`
	TimeoutMs int64                    `json:"timeout_ms,omitempty"`
	Hit       *protocol.HitRequest     `json:"hit,omitempty"`
	Reset     *protocol.ResetRequest   `json:"reset,omitempty"`
	Reserve   *protocol.ReserveRequest `json:"reserve,omitempty"`
	Counter   *protocol.CounterRequest `json:"counter,omitempty"`
}

// RoutingKey is the string that picks the request's partition.
func (r *OwnerRequest) RoutingKey() (string, error) {
	switch r.Op {
	case OpHit:
		if r.Hit != nil {
			return r.Hit.Tenant(), nil
		}
	case OpReset:
		if r.Reset != nil {
			return r.Reset.Tenant, nil
		}
	case OpReserve:
		if r.Reserve != nil {
			return r.Reserve.Principal, nil
		}
	case OpRelease, OpCount:
		if r.Counter != nil {
			return r.Counter.Principal, nil
		}
	default:
		return "", fmt.Errorf("%w: unknown op %q", protocol.ErrInvalid, r.Op)
	}
	return "", fmt.Errorf("%w: op %q without its body", protocol.ErrInvalid, r.Op)
}

// Validate checks the body of r (the same checks the client makes).
func (r *OwnerRequest) Validate() error {
	if _, err := r.RoutingKey(); err != nil {
		return err
	}
	switch r.Op {
	case OpHit:
		return r.Hit.Validate()
	case OpReset:
		return r.Reset.Validate()
	case OpReserve:
		return r.Reserve.Validate()
	default:
		return r.Counter.Validate()
	}
}

// DurationMs converts a wire millisecond count: 0 (or less) is def, and
// a count is capped at claims.MaxTTL.
func DurationMs(ms int64, def time.Duration) time.Duration {
	if ms <= 0 {
		return def
	}
	if ms > int64(claims.MaxTTL/time.Millisecond) {
		return claims.MaxTTL
	}
	return time.Duration(ms) * time.Millisecond
}
