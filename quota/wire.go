package quota

import (
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/protocol"
)

// The owner protocol: JSON requests ({"op":"hit"|"reset"|"reserve"|
// "release"|"count",…}) or binary batch frames (first byte 0xFA) on
// partitionSubject(prefix, n), answered by the worker holding partition n's
// lease; internal to sluice (docs/DESIGN.md "The owner protocol").
// quota/owner serves the protocol; its names are exported for it.
const (
	OpHit     = "hit"
	OpReset   = "reset"
	OpReserve = "reserve"
	OpRelease = "release"
	OpCount   = "count"
)

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
