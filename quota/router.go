package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/internal/retry"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/coalesce"
	"github.com/sluice-dev/sluice/quota/internal/frame"
	"github.com/sluice-dev/sluice/quota/internal/lease"
	"github.com/sluice-dev/sluice/quota/internal/settings"
)

// Errors, besides protocol.ErrInvalid: the request is malformed (the
// caller's fault; answer 400).
var (
	// protocol.ErrUnavailable: the partition owner did not answer within the call's
	// budget (timeout, no responders after retries, handoff in progress).
	// A value, never a panic: callers fall back to node-local state.
	errUnavailable = fmt.Errorf("quota: %w", protocol.ErrUnavailable)
	// ErrPartitionMismatch: the fleet was created with another partition
	// count; a node configured differently refuses to start.
	ErrPartitionMismatch = lease.ErrPartitionMismatch
	// ErrShardMismatch: the fleet was created with another shard count.
	ErrShardMismatch = lease.ErrShardMismatch
)

// Router calls the partition owners directly: it routes each request to
// <prefix>.v1.quota.p.<Partition(tenant or principal, P)> in one round
// trip. Every call has a deadline: ctx's, or the budget when ctx has none.
// No responders (a partition changing hands) is retried with a short backoff
// inside the deadline; past it the call fails with protocol.ErrUnavailable.
// A Router is safe for concurrent use.
type Router struct {
	nc       *nats.Conn
	p        int
	budget   time.Duration
	subjects []string
	co       *coalesce.Coalescer // the frames of hits and settles
	jsonHits bool                // WithCoalescing(false): one JSON request per hit
	local    LocalOwner          // WithLocalOwner: hits it serves are decided in process
	reach    func() bool         // WithReachable (nil: always sent)
}

// errUnreachable is a call's error while WithReachable reports the owners
// out of reach (nothing is sent).
var errUnreachable = fmt.Errorf("%w: the owners are not reachable", errUnavailable)

// unreachable reports whether calls are not to be sent (WithReachable).
func (c *Router) unreachable() bool { return c.reach != nil && !c.reach() }

// NewRouter returns a Router over nc. Options read: WithPrefix,
// WithPartitions (must be the fleet's: a misrouted request is answered
// protocol.ErrInvalid), WithBudget, WithCoalescing, WithLocalOwner, WithReachable.
func NewRouter(nc *nats.Conn, opts ...RouterOption) (*Router, error) {
	if nc == nil {
		return nil, invalid("NewRouter needs a connection")
	}
	cfg := routerConfig{Config: settings.Defaults(), budget: protocol.DefaultTimeout}
	if err := option.Apply(&cfg, opts, RouterOption.applyRouter); err != nil {
		return nil, err
	}
	if o := cfg.localOwner; o != nil {
		if prefix, p := o.Routing(); prefix != cfg.Prefix || p != cfg.Partitions {
			return nil, invalid("WithLocalOwner: the owner routes with prefix %q and %d partitions, the client with %q and %d", prefix, p, cfg.Prefix, cfg.Partitions)
		}
	}
	c := &Router{nc: nc, p: cfg.Partitions, budget: cfg.budget, subjects: make([]string, cfg.Partitions), local: cfg.localOwner, reach: cfg.reachable,
		jsonHits: cfg.noCoalesce}
	for n := range c.subjects {
		c.subjects[n] = PartitionSubject(cfg.Prefix, n)
	}
	prefix := cfg.Prefix
	c.co = coalesce.New(nc, c.subjects, func(s []byte) bool { return isMemberSubject(prefix, s) })
	return c, nil
}

// Coalescer is the Router's coalescer, for
// the tests and diagnostics of the quota tree (its type is internal).
func (c *Router) Coalescer() *coalesce.Coalescer { return c.co }

// Partitions is the partition count the Router routes with.
func (c *Router) Partitions() int { return c.p }

// Budget is the deadline of a call whose context has none.
func (c *Router) Budget() time.Duration { return c.budget }

// Hit charges r's GCRA buckets and, if they all admit it and r has a claim,
// takes the claim as pending, in one round trip to the tenant's owner (or in
// process, WithLocalOwner). Results that are not failures are in the reply.
// Errors: protocol.ErrInvalid, or protocol.ErrUnavailable (nothing was spent).
func (c *Router) Hit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	if err := r.Validate(); err != nil {
		return protocol.HitReply{}, err
	}
	n := Partition(r.Tenant(), c.p)
	if c.local != nil {
		if rep, done, err := c.local.HitLocal(ctx, &r, n, c.budget); done {
			return rep, err
		}
	}
	if c.unreachable() {
		return protocol.HitReply{}, errUnreachable
	}
	if c.jsonHits || !frameable(&r) || c.co.Start() != nil {
		return c.hitJSON(ctx, &r)
	}
	a, deadline, err := c.viaFrame(ctx, n, coalesced{&r})
	switch {
	case err != nil:
		return protocol.HitReply{}, err
	case a.Status == coalesce.TooBig:
		ctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		return c.hitJSON(ctx, &r)
	case a.Status != frame.StatusAnswered: // claim_lost: not an answer to a hit
		return protocol.HitReply{}, fmt.Errorf("%w: %s answered a hit %q", errUnavailable, c.subjects[n], a.Reason)
	}
	return decodeHitReply(&a, &r), nil
}

// viaFrame sends it in a frame to partition n's owner and waits for its
// answer, retrying with a backoff while nobody serves the partition, until
// ctx's deadline or the budget (the returned deadline). The answer is
// frame.StatusAnswered, frame.StatusLost (a settle's) or coalesce.TooBig
// (the owner does not speak frames: send it as JSON); any other outcome is
// an error wrapping protocol.ErrInvalid or protocol.ErrUnavailable.
func (c *Router) viaFrame(ctx context.Context, n int, it coalesce.Item) (coalesce.Answer, time.Time, error) {
	// No context per call: the frame's timer answers an item at its
	// deadline, the budget when ctx has none.
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.budget)
	}
	waits := retry.Doubling(minBackoff, maxBackoff)
	for attempt := 1; ; attempt++ {
		a := c.co.Send(ctx, n, it, deadline)
		reason := a.Reason
		switch a.Status {
		case frame.StatusAnswered, frame.StatusLost, coalesce.TooBig:
			return a, deadline, nil
		case frame.StatusInvalid:
			return a, deadline, fmt.Errorf("%w: %s", protocol.ErrInvalid, reason)
		case coalesce.Retry:
		case coalesce.Timeout:
			err := ctx.Err()
			if err == nil {
				err = context.DeadlineExceeded // the budget
			}
			return a, deadline, fmt.Errorf("%w: %s (attempt %d): %s: %w", errUnavailable, c.subjects[n], attempt, reason, err)
		default: // frame.StatusUnavailable, coalesce.Failed
			return a, deadline, fmt.Errorf("%w: %s: %s", errUnavailable, c.subjects[n], reason)
		}
		_ = retry.Sleep(ctx, min(waits.NextBackOff(), time.Until(deadline)))
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return a, deadline, fmt.Errorf("%w: %s: nobody serves the partition (attempt %d): %s", errUnavailable, c.subjects[n], attempt, reason)
		}
	}
}

// hitJSON sends r as one JSON request (WithCoalescing(false), or a hit no
// frame can carry).
func (c *Router) hitJSON(ctx context.Context, r *protocol.HitRequest) (protocol.HitReply, error) {
	var rep protocol.HitReply
	err := c.call(ctx, r.Tenant(), &OwnerRequest{Op: OpHit, Hit: r}, &rep)
	return rep, err
}

// Reset forgets the tenant's GCRA buckets (they are full again).
// Errors: protocol.ErrInvalid, protocol.ErrUnavailable.
func (c *Router) Reset(ctx context.Context, tenant string) error {
	r := protocol.ResetRequest{Tenant: tenant}
	if err := r.Validate(); err != nil {
		return err
	}
	var rep protocol.OKReply
	return c.call(ctx, tenant, &OwnerRequest{Op: OpReset, Reset: &r}, &rep)
}

// Reserve takes one slot of the (principal, key) counter if its count is
// below r.Max: granted with the count after the increment, or denied with
// the count that blocked it. The count is durable (written through to KV)
// when the reply arrives; it expires ttl_ms (default 1 h) after its last
// change. Errors: protocol.ErrInvalid (max < 1 …), protocol.ErrUnavailable.
func (c *Router) Reserve(ctx context.Context, r protocol.ReserveRequest) (protocol.ReserveReply, error) {
	return counterCall[protocol.ReserveReply](ctx, c, r.Validate(), r.Principal, &OwnerRequest{Op: OpReserve, Reserve: &r})
}

// Release gives one slot back and returns the count after it; at zero it
// is a no-op. Errors: protocol.ErrInvalid, protocol.ErrUnavailable.
func (c *Router) Release(ctx context.Context, r protocol.CounterRequest) (protocol.CountReply, error) {
	return counterCall[protocol.CountReply](ctx, c, r.Validate(), r.Principal, &OwnerRequest{Op: OpRelease, Counter: &r})
}

// Count reads the counter. Errors: protocol.ErrInvalid, protocol.ErrUnavailable.
func (c *Router) Count(ctx context.Context, r protocol.CounterRequest) (protocol.CountReply, error) {
	return counterCall[protocol.CountReply](ctx, c, r.Validate(), r.Principal, &OwnerRequest{Op: OpCount, Counter: &r})
}

// counterCall is a counter's call: invalid (the request's validation) or
// the owner's reply to req, sent for principal's partition.
func counterCall[R any](ctx context.Context, c *Router, invalid error, principal string, req *OwnerRequest) (R, error) {
	var rep R
	if invalid != nil {
		return rep, invalid
	}
	err := c.call(ctx, principal, req, &rep)
	return rep, err
}

// Retry backoff while nobody serves a partition.
const (
	minBackoff = 2 * time.Millisecond
	maxBackoff = 25 * time.Millisecond
)

// call sends req to the owner of key's partition and decodes the reply.
func (c *Router) call(ctx context.Context, key string, req *OwnerRequest, reply any) error {
	if c.unreachable() {
		return errUnreachable
	}
	ctx, cancel := kvstore.WithBudget(ctx, c.budget)
	defer cancel()
	subject := c.subjects[Partition(key, c.p)]
	waits := retry.Doubling(minBackoff, maxBackoff)
	for attempt := 1; ; attempt++ {
		if dl, ok := ctx.Deadline(); ok {
			req.TimeoutMs = max(1, time.Until(dl).Milliseconds())
		}
		data, err := json.Marshal(req)
		if err != nil {
			return fmt.Errorf("%w: %v", protocol.ErrInvalid, err)
		}
		resp, err := c.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: subject, Data: data})
		again := false
		switch {
		case err == nil:
			code := resp.Header.Get(micro.ErrorCodeHeader)
			if code == "" {
				if err := json.Unmarshal(resp.Data, reply); err != nil {
					return fmt.Errorf("%w: malformed reply from %s: %v", errUnavailable, subject, err)
				}
				return nil
			}
			reason := resp.Header.Get(micro.ErrorHeader)
			switch {
			case code == "400":
				return fmt.Errorf("%w: %s", protocol.ErrInvalid, reason)
			case code == "503" && reason == protocol.NotOwner.Code:
				again = true
				err = errors.New(protocol.NotOwner.Code)
			default:
				return fmt.Errorf("%w: owner of %s answered %s %s", errUnavailable, subject, code, reason)
			}
		case errors.Is(err, nats.ErrNoResponders):
			again = true
		}
		if !again {
			return fmt.Errorf("%w: %s (attempt %d): %w", errUnavailable, subject, attempt, err)
		}
		if retry.Sleep(ctx, waits.NextBackOff()) != nil {
			return fmt.Errorf("%w: %s: nobody serves the partition (attempt %d): %w", errUnavailable, subject, attempt, err)
		}
	}
}
