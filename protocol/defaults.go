package protocol

import "time"

// Defaults of the contract (docs/PROTOCOL.md), each written once: every
// package of sluice and the Go client refer to these.
const (
	// DefaultTimeout is the default per-call budget: one call to the
	// fleet store (--store-timeout), and a Go client's call whose context
	// has no deadline.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultSettleTimeout bounds claims.settle and claims.release (and a
	// client's settle whose context has no deadline): the caller has done
	// the work by then, so it is worth waiting longer than for a hit.
	DefaultSettleTimeout = time.Second
	// DefaultPendingTTL is the TTL of a pending claim whose request names
	// none (--pending-ttl).
	DefaultPendingTTL = 30 * time.Second
	// DefaultCommittedTTL is how long a settled claim is kept when its
	// settle names no TTL (ttl_ms 0; --dedupe-ttl).
	DefaultCommittedTTL = 72 * time.Hour
	// DefaultReplayCapacity is how many replay claims are held at the
	// most (--replay-capacity).
	DefaultReplayCapacity = 1_000_000
	// DefaultPartitions is a fleet's number of quota partitions
	// (--partitions).
	DefaultPartitions = 64
	// DefaultMaxInFlightHooks is how many hooks a node serves at once
	// (--max-inflight-hooks).
	DefaultMaxInFlightHooks = 512
)
