package client

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// Hit sends <prefix>.v1.quota.hit: every charge of req is taken, all or
// nothing, from its GCRA bucket, and when req.Claim is set a pending dedupe
// claim is taken for its hook id, in one round trip. rep.Result is
// ResultOK (rep.Revision is what Settle or ReleaseClaim must present),
// ResultRateLimited (retry after rep.RetryAfterMs), ResultDuplicate
// (rep.HookID is the original) or ResultPending (another holder's claim is
// in flight); only ok spends charges. An unknown result is returned as is;
// rep.Fallback is never set. protocol.ErrUnavailable also for a hit with a claim the
// service could answer only from node-local state.
func (c *Client) Hit(ctx context.Context, req protocol.HitRequest) (protocol.HitReply, error) {
	var rep protocol.HitReply
	if err := c.call(ctx, c.subj[protocol.QuotaHit], c.timeout, req, &rep); err != nil {
		return protocol.HitReply{}, err
	}
	if rep.Result == "" {
		return protocol.HitReply{}, fmt.Errorf("%w: %s: reply without a result", ErrBadReply, c.subj[protocol.QuotaHit])
	}
	rep.Fallback = false
	return rep, nil
}

// Reset sends <prefix>.v1.quota.reset: the tenant's rate-limit buckets are
// forgotten fleet-wide (they are full again).
func (c *Client) Reset(ctx context.Context, tenant string) error {
	return c.callOK(ctx, c.subj[protocol.QuotaReset], c.timeout, protocol.ResetRequest{Tenant: tenant})
}

// Reserve sends <prefix>.v1.quota.reserve: one slot of the (principal,
// key) counter is taken iff its count is below req.Max, atomically. rep.Count
// is the count after the grant, or the one that denied it (a value, not an
// error). The count expires req.TTLMs (0: the service's default, 1 h) after
// its last change, so leaked slots come back.
func (c *Client) Reserve(ctx context.Context, req protocol.ReserveRequest) (protocol.ReserveReply, error) {
	var rep protocol.ReserveReply
	if err := c.call(ctx, c.subj[protocol.QuotaReserve], c.timeout, req, &rep); err != nil {
		return protocol.ReserveReply{}, err
	}
	return rep, nil
}

// Release sends <prefix>.v1.quota.release: one slot of the (principal,
// key) counter is given back; it returns the count after it (0 stays 0).
func (c *Client) Release(ctx context.Context, principal, key string) (count int64, err error) {
	var rep protocol.CountReply
	if err := c.call(ctx, c.subj[protocol.QuotaRelease], c.timeout, protocol.CounterRequest{Principal: principal, Key: key}, &rep); err != nil {
		return 0, err
	}
	return rep.Count, nil
}

// Count sends <prefix>.v1.quota.count: the (principal, key) counter's
// current count (0 when it has none).
func (c *Client) Count(ctx context.Context, principal, key string) (int64, error) {
	var rep protocol.CountReply
	if err := c.call(ctx, c.subj[protocol.QuotaCount], c.timeout, protocol.CounterRequest{Principal: principal, Key: key}, &rep); err != nil {
		return 0, err
	}
	return rep.Count, nil
}
