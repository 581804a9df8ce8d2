package service

import (
	"context"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/cooldown"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/protocol"
)

// Quota is what the quota.* endpoints need: the fleet's GCRA limits and
// reserve/release counters (quota.Router: every answer is the owner's;
// quota.Fleet's node-local hit fallback is the edge's, not the service's).
// Errors wrap protocol.ErrInvalid (400) or protocol.ErrUnavailable (503).
type Quota interface {
	// Hit charges every charge of req and, when req.Claim is set, takes a
	// pending dedupe claim, in one round trip to the tenant's owner.
	Hit(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error)
	// Reset forgets the tenant's rate-limit buckets fleet-wide.
	Reset(ctx context.Context, tenant string) error
	// Reserve takes one slot of the (principal, key) counter iff its count
	// is below req.Max.
	Reserve(ctx context.Context, req protocol.ReserveRequest) (protocol.ReserveReply, error)
	// Release gives one slot back (a no-op at zero).
	Release(ctx context.Context, req protocol.CounterRequest) (protocol.CountReply, error)
	// Count reads the counter.
	Count(ctx context.Context, req protocol.CounterRequest) (protocol.CountReply, error)
	// Settle commits the pending claim a hit took, durably, at the
	// tenant's partition owner (claims.settle). Errors: protocol.ErrClaimLost,
	// protocol.ErrInvalid, protocol.ErrUnavailable.
	Settle(ctx context.Context, req protocol.SettleRequest) error
}

// Cooldown is what the cooldown.* endpoints need; *cooldown.Store
// implements it.
//
// Errors: protocol.ErrInvalid (400); protocol.ErrUnavailable (503) when the
// shared store did not take a write in time.
type Cooldown interface {
	// Record stores a reading and drops a penalty it has reached.
	Record(ctx context.Context, r protocol.Reading) error
	// Penalize sets (untilMs non-nil) or clears (nil) a penalty.
	Penalize(ctx context.Context, account, backend string, untilMs *int64) error
	// Load returns one entry per requested backend, in order.
	Load(ctx context.Context, account string, backends []string) ([]protocol.Entry, error)
}

// Events receives the denials the service decides: a quota.hit answered
// rate_limited publishes limit.denied.<tenant> once, from the node that
// answered the NATS caller (the HTTP edge publishes its own denials: its
// hits do not pass through the service). *events.Publisher implements it.
type Events interface {
	HitDenied(req *protocol.HitRequest, rep *protocol.HitReply, source string)
}

// Compile-time checks of the implementations the service is wired with.
var (
	_ Cooldown           = (*cooldown.Store)(nil)
	_ claims.Store       = (*claims.KV)(nil)
	_ claims.ReplayStore = (*claims.KVReplay)(nil)
	_ Events             = (*events.Publisher)(nil)
)
