package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/internal/option"
	"github.com/sluice-dev/sluice/internal/promreg"
	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
	"github.com/sluice-dev/sluice/quota/internal/settings"
)

// Fleet is the Router with a node-local fallback: when the partition owner
// cannot answer within the budget (protocol.ErrUnavailable), it decides charges from
// node-local state (gcra.Limiter) and says so:
// HitReply.Fallback, sluice_quota_fallback_total{op}, and one log line per
// transition. While degraded each node applies 1/M of every limit, M the
// live members (WithMembers); without it N nodes admit up to N × a limit.
//
// A claim is never taken in node-local memory (two nodes would both accept
// one key: 67 of 200 split in a 64-way race): the fallback takes it in the
// fleet's claim store with a fresh budget, and when that cannot answer the
// hit fails with protocol.ErrUnavailable — "at most one winner per key" beats
// availability. ErrInvalid never falls back. Counters have none either
// (each node would grant up to max): Router() serves them. Safe for
// concurrent use.
type Fleet struct {
	c          *Router
	local      *gcra.Limiter
	claims     claims.Store // the fleet's claim store (KV): the fallback takes claims there, never in node memory
	budget     time.Duration
	now        func() time.Time
	members    func() int // live members (nil: unknown)
	pendingTTL time.Duration
	log        *slog.Logger
	fallbacks  *prometheus.CounterVec
	degraded   atomic.Bool
}

// NewFleet wraps client with node-local fallback state. store is the
// fleet's claim store, used directly for the claim of a hit the owner could
// not answer. The error wraps protocol.ErrInvalidOption for a bad option or a nil
// dependency.
func NewFleet(client *Router, local *gcra.Limiter, store claims.Store, opts ...FleetOption) (*Fleet, error) {
	if client == nil || local == nil || store == nil {
		return nil, invalid("NewFleet needs a client, a local limiter and the fleet's claims store")
	}
	cfg := fleetConfig{Config: settings.Defaults()}
	if err := option.Apply(&cfg, opts, FleetOption.applyFleet); err != nil {
		return nil, err
	}
	ms := promreg.NewSet(cfg.Reg, "quota")
	f := &Fleet{
		c:          client,
		local:      local,
		claims:     store,
		budget:     client.Budget(), // one budget for the owner call and the fallback
		now:        cfg.Now,
		members:    cfg.members,
		pendingTTL: cfg.PendingTTL,
		log:        cfg.Log,
		fallbacks:  ms.CounterVec("fallback_total", "Quota calls answered from node-local state because the fleet was unavailable, by op.", "op"),
	}
	if err := ms.Err(); err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	promreg.Zero(f.fallbacks, []string{OpHit}) // exported at zero (alert SluiceQuotaFallback); counters have no fallback
	return f, nil
}

// Router is the wrapped Router.
func (f *Fleet) Router() *Router { return f.c }

// Degraded reports whether the last call fell back to local state.
func (f *Fleet) Degraded() bool { return f.degraded.Load() }

// outcome records whether a call reached the fleet, logging transitions.
func (f *Fleet) outcome(op string, err error) bool {
	if err == nil {
		if f.degraded.CompareAndSwap(true, false) {
			f.log.Info("quota: fleet reachable again; node-local fallback off", "op", op)
		}
		return false
	}
	if !errors.Is(err, errUnavailable) {
		return false
	}
	f.fallbacks.WithLabelValues(op).Inc()
	if f.degraded.CompareAndSwap(false, true) {
		f.log.Warn("quota: fleet unavailable; answering from node-local state", "op", op, "err", err)
	}
	return true
}

// Hit is Router.Hit with the local fallback (HitReply.Fallback set): the local
// limiter, and the claim in the fleet's claim store (protocol.ErrUnavailable, charges
// refunded, when that cannot answer). The call stays within one budget;
// with a claim the owner gets 60% of it, the rest is the fallback's.
func (f *Fleet) Hit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	ctx, cancel := kvstore.WithBudget(ctx, f.budget)
	defer cancel()
	octx := ctx
	if r.Claim != nil {
		if dl, ok := ctx.Deadline(); ok {
			var ocancel context.CancelFunc
			octx, ocancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*6/10))
			defer ocancel()
		}
	}
	rep, err := f.c.Hit(octx, r)
	if !f.outcome(OpHit, err) {
		return rep, err
	}
	return f.localHit(ctx, r)
}

func (f *Fleet) localHit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	keys := make([]string, len(r.Charges))
	lims := make([]gcra.Limit, len(r.Charges))
	m := f.liveMembers()
	for i, c := range r.Charges {
		keys[i] = localKey(c.Tenant, c.Kind)
		lims[i] = shareOf(gcra.Limit{Increment: c.IncrementUs, Capacity: c.CapacityUs}, m)
	}
	now := gcra.Micros(f.now())
	d, err := f.local.ChargeAll(keys, lims, now)
	if err != nil {
		return protocol.HitReply{}, fmt.Errorf("%w: %w", protocol.ErrInvalid, err)
	}
	if !d.Allowed {
		return protocol.HitReply{Result: protocol.ResultRateLimited, RetryAfterMs: max(1, timeconv.CeilMs(d.RetryAfter)), Fallback: true}, nil
	}
	if r.Claim == nil {
		return protocol.HitReply{Result: protocol.ResultOK, Fallback: true}, nil
	}
	cl := r.Claim
	// What is left of the budget (about 40% of it, see Hit); nothing left
	// means unavailable, never a call past the budget.
	left := f.budget
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	if left <= 0 {
		now := gcra.Micros(f.now())
		for i := range keys {
			f.local.Refund(keys[i], lims[i], now)
		}
		return protocol.HitReply{}, fmt.Errorf("%w: no budget left for the claim", errUnavailable)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), left)
	res, err := f.claims.Claim(cctx, claims.ID{Tenant: cl.Tenant, Source: cl.Source, Key: cl.Key}, cl.HookID, DurationMs(cl.PendingTTLMs, f.pendingTTL))
	cancel()
	a, err := ClaimAnswer(res, err, nil)
	if a.Result != frame.ResultOK {
		now := gcra.Micros(f.now())
		for i := range keys {
			f.local.Refund(keys[i], lims[i], now)
		}
	}
	if err != nil {
		return protocol.HitReply{}, err
	}
	rep := AnswerReply(&a, nil)
	rep.Fallback = true
	return rep, nil
}

// liveMembers is the number of members the fallback shares a limit among
// (at least 1).
func (f *Fleet) liveMembers() int {
	if f.members == nil {
		return 1
	}
	return max(1, f.members())
}

// shareOf is one member's share of l among m: the rate and the burst
// divided by m (the increment m times longer, the same capacity), and at
// least one charge's worth of capacity, so a charge that fits the whole
// limit still fits a share of it.
func shareOf(l gcra.Limit, m int) gcra.Limit {
	if m <= 1 || l.Increment < 1 {
		return l
	}
	if l.Increment > math.MaxInt64/int64(m) {
		return gcra.Limit{Increment: math.MaxInt64, Capacity: math.MaxInt64}
	}
	inc := l.Increment * int64(m)
	return gcra.Limit{Increment: inc, Capacity: max(l.Capacity, inc)}
}

// localKey names the node-local bucket of (tenant, kind): the tenant first,
// so that Reset finds every kind of it by prefix (a tenant holds no NUL).
func localKey(tenant, kind string) string { return tenant + "\x00" + kind }

// Reset resets the tenant's buckets in the fleet and locally: every kind
// of it, a source's own kinds included, as the owners do. It returns the
// fleet's error, if any.
func (f *Fleet) Reset(ctx context.Context, tenant string) error {
	err := f.c.Reset(ctx, tenant)
	if errors.Is(err, protocol.ErrInvalid) {
		return err
	}
	f.local.ResetPrefix(localKey(tenant, ""))
	return err
}
