package quota

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/coalesce"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// Settle commits the pending claim that a Hit took for r.HookID at
// r.Revision, kept r.TTLMs (0: the owner's --dedupe-ttl): the one path of
// every claims.settle (the service's endpoint, the settle event, this
// client). It returns once the committed claim is durable as the node's
// durability level promises (group commit: on disk).
//
// The settle goes to the tenant's partition owner — in process when this
// client's own worker serves the partition (WithLocalOwner), else in a
// batch frame with the hits and settles of other callers. The owner
// commits a claim it granted itself in one revision-checked write, any
// other after reading the holder (quota/owner's settle.go). A key longer
// than claims.MaxKeyBytes travels in the form the store keeps it
// (claims.NormalizeKey).
//
// A ctx without a deadline is bounded by protocol.DefaultSettleTimeout
// (the Client's budget when that is longer), not by the hits' budget: the
// settle waits on the store's sync and has no fallback.
//
// Errors: protocol.ErrClaimLost when the revision is stale, another hook id holds
// the claim or it is already committed; protocol.ErrInvalid; ErrUnavailable.
func (c *Client) Settle(ctx context.Context, r protocol.SettleRequest) error {
	if err := r.Validate(); err != nil {
		return err
	}
	r.Key = claims.NormalizeKey(r.Key)
	ctx, cancel := kvstore.WithBudget(ctx, max(c.budget, protocol.DefaultSettleTimeout))
	defer cancel()
	n := Partition(r.Tenant, c.p)
	if c.local != nil {
		if done, err := c.local.SettleLocal(ctx, &r, n, c.budget); done {
			return err
		}
	}
	if c.unreachable() {
		return errUnreachable
	}
	if err := c.co.Start(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, c.subjects[n], err)
	}
	a, _, err := c.viaFrame(ctx, n, settleItem{&r})
	switch {
	case err != nil:
		return err
	case a.Status == frame.StatusLost:
		return fmt.Errorf("%w: %s", protocol.ErrClaimLost, a.Reason)
	case a.Status == coalesce.TooBig: // a frame over the server's max payload
		return fmt.Errorf("%w: %s: %s", ErrUnavailable, c.subjects[n], a.Reason)
	case a.Result != frame.ResultOK:
		return fmt.Errorf("%w: %s answered a settle with result %d", ErrUnavailable, c.subjects[n], a.Result)
	}
	return nil
}
