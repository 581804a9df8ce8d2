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
// every claims.settle. It goes to the tenant's partition owner (in process
// with WithLocalOwner, else in a batch frame) and returns once the committed
// claim is durable as the node's durability level promises. A key longer
// than claims.MaxKeyBytes travels normalized (claims.NormalizeKey).
//
// A ctx without a deadline is bounded by protocol.DefaultSettleTimeout
// (or the Router's longer budget): the settle waits on the sync and has no
// fallback. Errors: protocol.ErrClaimLost (stale revision, another hook id,
// already committed), protocol.ErrInvalid, protocol.ErrUnavailable.
func (c *Router) Settle(ctx context.Context, r protocol.SettleRequest) error {
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
		return fmt.Errorf("%w: %s: %w", errUnavailable, c.subjects[n], err)
	}
	a, _, err := c.viaFrame(ctx, n, settleItem{&r})
	switch {
	case err != nil:
		return err
	case a.Status == frame.StatusLost:
		return fmt.Errorf("%w: %s", protocol.ErrClaimLost, a.Reason)
	case a.Status == coalesce.TooBig: // a frame over the server's max payload
		return fmt.Errorf("%w: %s: %s", errUnavailable, c.subjects[n], a.Reason)
	case a.Result != frame.ResultOK:
		return fmt.Errorf("%w: %s answered a settle with result %d", errUnavailable, c.subjects[n], a.Result)
	}
	return nil
}
