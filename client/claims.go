package client

import (
	"context"
	"fmt"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

// Settle sends <prefix>.v1.claims.settle: the claim on (tenant, source,
// key) that Hit made pending for hookID at revision is committed and kept
// for the service's --dedupe-ttl; a later Hit on the key is a duplicate
// naming hookID. Deadline (ctx without one): SettleTimeout. ErrClaimLost
// (also protocol.ErrClaimLost): a stale revision, another hook id, or
// already committed.
func (c *Client) Settle(ctx context.Context, tenant, source, key, hookID string, revision uint64) error {
	return c.SettleTTL(ctx, tenant, source, key, hookID, revision, 0)
}

// SettleTTL is Settle keeping the committed claim for ttl (rounded up to
// whole milliseconds, and by the service to seconds) instead of the
// service's default; 0 means the default.
func (c *Client) SettleTTL(ctx context.Context, tenant, source, key, hookID string, revision uint64, ttl time.Duration) error {
	if ttl < 0 {
		return fmt.Errorf("%w: %s: ttl must be >= 0, got %v", ErrInvalid, c.subj[protocol.ClaimsSettle], ttl)
	}
	req := protocol.ClaimsRequest{Tenant: tenant, Source: source, Key: key, HookID: hookID, Revision: revision, TTLMs: ceilMs(ttl)}
	return c.callOK(ctx, c.subj[protocol.ClaimsSettle], c.settleTimeout, req)
}

// ReleaseClaim sends <prefix>.v1.claims.release: the claim on (tenant,
// source, key) that hookID holds at revision (pending or committed) is
// dropped, so the key can be claimed again at once (the claimed work
// failed). Deadline: SettleTimeout. ErrClaimLost: a stale revision or
// another hook id.
func (c *Client) ReleaseClaim(ctx context.Context, tenant, source, key, hookID string, revision uint64) error {
	req := protocol.ClaimsRequest{Tenant: tenant, Source: source, Key: key, HookID: hookID, Revision: revision}
	return c.callOK(ctx, c.subj[protocol.ClaimsRelease], c.settleTimeout, req)
}

// GetClaim sends <prefix>.v1.claims.get: the state of the claim on
// (tenant, source, key); a key nobody holds is protocol.StateAbsent, not
// an error.
func (c *Client) GetClaim(ctx context.Context, tenant, source, key string) (protocol.ClaimState, error) {
	var st protocol.ClaimState
	if err := c.call(ctx, c.subj[protocol.ClaimsGet], c.timeout, protocol.ClaimsRequest{Tenant: tenant, Source: source, Key: key}, &st); err != nil {
		return protocol.ClaimState{}, err
	}
	if st.State == "" {
		return protocol.ClaimState{}, fmt.Errorf("%w: %s: reply without a state", ErrBadReply, c.subj[protocol.ClaimsGet])
	}
	return st, nil
}

// ceilMs is d in whole milliseconds, rounded up (0 for d <= 0).
func ceilMs(d time.Duration) int64 {
	return int64((max(d, 0) + time.Millisecond - 1) / time.Millisecond)
}
