package quota

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/internal/claimwire"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/quota/internal/coalesce"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// Settle commits the pending claim that a Hit took for r.HookID at
// r.Revision, kept r.TTLMs (0: the node's --dedupe-ttl): the claims.settle
// of docs/PROTOCOL.md. It returns once the committed claim is durable as
// the node's durability level promises (group commit: on disk).
//
// The settle rides a batch frame to the tenant's partition owner, with the
// hits and settles of other callers, when that owner has said in a reply
// that it serves settle items (so after a Hit of that partition); the owner
// commits a claim it took itself in one revision-checked write. Otherwise
// — coalescing off, an owner that predates settle items, strings too long
// for a frame — it is one JSON request to <prefix>.v1.claims.settle (the
// client's prefix: an edge's client, whose prefix is quota.HubPrefix's,
// has no service there, and settles its hooks' claims in process).
//
// A ctx without a deadline is bounded by DefaultSettleBudget (the Client's
// budget when that is longer), not by the hits' budget.
//
// Errors: claims.ErrLost when the revision is stale, another hook id holds
// the claim or it is already committed; ErrInvalid; ErrUnavailable.
func (c *Client) Settle(ctx context.Context, r SettleRequest) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if c.unreachable() {
		return errUnreachable
	}
	ctx, cancel := kvstore.WithBudget(ctx, max(c.budget, DefaultSettleBudget))
	defer cancel()
	n := Partition(r.Tenant, c.p)
	if c.co == nil || !settleFrameable(&r) || c.co.Start() != nil {
		return c.settleJSON(ctx, &r)
	}
	// Send answers Legacy for an owner not known to serve settle items.
	a, deadline, err := c.viaFrame(ctx, n, settleItem{&r})
	switch {
	case err != nil:
		return err
	case a.Status == frame.StatusLost:
		return fmt.Errorf("%w: %s", claims.ErrLost, a.Reason)
	case a.Status == coalesce.Legacy:
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		return c.settleJSON(ctx, &r)
	case a.Result != frame.ResultOK:
		return fmt.Errorf("%w: %s answered a settle with result %d", ErrUnavailable, c.subjects[n], a.Result)
	}
	return nil
}

// settleJSON sends r to the service's claims.settle (any node's).
func (c *Client) settleJSON(ctx context.Context, r *SettleRequest) error {
	data, err := json.Marshal(claimwire.Request{Tenant: r.Tenant, Source: r.Source, Key: r.Key, HookID: r.HookID, Revision: r.Revision, TTLMs: r.TTLMs})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	resp, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: c.settle, Data: data})
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, c.settle, err)
	}
	switch code, reason := resp.Header.Get(micro.ErrorCodeHeader), resp.Header.Get(micro.ErrorHeader); code {
	case "":
	case "409":
		return fmt.Errorf("%w: %s: %s", claims.ErrLost, c.settle, reason)
	case "400":
		return fmt.Errorf("%w: %s", ErrInvalid, reason)
	default:
		return fmt.Errorf("%w: %s answered %s %s", ErrUnavailable, c.settle, code, reason)
	}
	var ok OKReply
	if err := json.Unmarshal(resp.Data, &ok); err != nil || !ok.OK {
		return fmt.Errorf("%w: %s: reply %q is not {\"ok\":true}", ErrUnavailable, c.settle, resp.Data)
	}
	return nil
}
