package owner

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/internal/timeconv"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
	"github.com/sluice-dev/sluice/quota/internal/lease"
)

// tenure is one holding of one partition's lease, from a successful Create
// to the release or loss. Its state starts empty (full buckets, counters
// loaded from KV) and dies with it; requests in flight keep it alive but
// cannot touch a later one. After a lapsed lease (lease.Lease.Lapsed) a
// bucket it has not touched starts with 1/takeoverShare of its burst (at
// least one charge): docs/DESIGN.md "Partitions, leases and fencing".
type tenure struct {
	w       *Worker
	n       int
	subject string
	lease   *lease.Lease

	sub *nats.Subscription // lease loop goroutine only

	ended    atomic.Bool // released or lost: serve nothing more
	inflight tracker

	mu       sync.Mutex
	state    bucketState // GCRA buckets
	counters map[string]*counter
	lapsedAt int64 // µs: the takeover of a lapsed lease (0: buckets start full)
}

// takeoverShare: a bucket starts a lapsed takeover with 1/takeoverShare of
// its burst (see tenure).
const takeoverShare = 8

func (w *Worker) newTenure(l *lease.Lease) *tenure {
	t := &tenure{
		w:        w,
		n:        l.N,
		subject:  quota.PartitionSubject(w.cfg.Prefix, l.N),
		lease:    l,
		state:    newBucketState(),
		counters: make(map[string]*counter),
	}
	if l.Lapsed {
		t.lapsedAt = gcra.Micros(w.cfg.Now())
	}
	return t
}

// tat is the bucket's TAT for a charge of lim: its state, or after a
// lapsed takeover 1/takeoverShare of its burst left (see tenure). A bucket
// dropped since gives a TAT <= now, so the rule cannot make a refilled
// bucket stricter. t.mu must be held.
func (t *tenure) tat(r *bucketRef, lim gcra.Limit) int64 {
	tat := t.state.get(r)
	if tat != 0 || t.lapsedAt == 0 {
		return tat
	}
	if spent := lim.Capacity - max(lim.Increment, lim.Capacity/takeoverShare); spent > 0 {
		if spent > math.MaxInt64-t.lapsedAt {
			return math.MaxInt64
		}
		return t.lapsedAt + spent
	}
	return 0
}

func (t *tenure) subscribe() error {
	sub, err := t.w.nc.QueueSubscribe(t.subject, queueGroup, t.handle)
	if err != nil {
		return err
	}
	t.sub = sub
	return nil
}

// end stops serving and admitting requests.
func (t *tenure) end() {
	t.ended.Store(true)
	t.inflight.close()
	if t.w.served != nil {
		t.w.served[t.n].CompareAndSwap(t, nil)
	}
}

func (t *tenure) serving() bool {
	return !t.ended.Load() && t.lease.Valid()
}

// handle is the subscription callback. It never waits on KV: hits are
// answered inline under the tenure lock; anything needing KV runs in a
// goroutine (bounded by the worker's semaphore) that replies when done.
func (t *tenure) handle(m *nats.Msg) {
	if frame.Is(m.Data) {
		t.w.serveFrame(m)
		return
	}
	if !t.serving() {
		respondError(m, 503, protocol.NotOwner.Code)
		return
	}
	var req quota.OwnerRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		t.invalid(m, &req, "invalid_request: "+err.Error())
		return
	}
	if err := req.Validate(); err != nil {
		t.invalid(m, &req, err.Error())
		return
	}
	key, _ := req.RoutingKey()
	if p := quota.Partition(key, t.w.cfg.Partitions); p != t.n {
		t.invalid(m, &req, misrouted(p, t.w.cfg.Partitions, t.n))
		return
	}
	timeout := min(quota.DurationMs(req.TimeoutMs, protocol.DefaultTimeout), maxOwnerTimeout)
	switch req.Op {
	case quota.OpHit:
		t.hit(m, req.Hit, timeout)
	case quota.OpReset:
		t.reset(req.Reset.Tenant)
		respondJSON(m, protocol.OKReply{OK: true})
	case quota.OpReserve, quota.OpRelease, quota.OpCount:
		t.async(m, timeout, func(ctx context.Context) { t.counterOp(ctx, m, &req) })
	}
}

func misrouted(p, of, n int) string {
	return "misrouted: partition " + itoa(p) + " of " + itoa(of) + ", not " + itoa(n) + " (is the client's partition count the fleet's?)"
}

func (t *tenure) invalid(m *nats.Msg, req *quota.OwnerRequest, reason string) {
	switch req.Op {
	case quota.OpHit:
		t.w.met.hit("invalid")
	case quota.OpReserve, quota.OpRelease, quota.OpCount:
		t.w.met.counterOps.WithLabelValues(req.Op, "invalid").Inc()
	}
	respondError(m, 400, reason)
}

// admit takes a slot of the worker's semaphore for one KV-bound request
// (blocking while maxInFlight wait: back-pressure) and registers with both
// trackers. False (nothing held) when the tenure or worker no longer
// admits; every true must be paired with finish.
func (t *tenure) admit() bool {
	w := t.w
	w.sem <- struct{}{}
	if !w.inflight.add() {
		<-w.sem
		return false
	}
	if !t.inflight.add() {
		w.inflight.done()
		<-w.sem
		return false
	}
	w.met.inFlight.Inc()
	return true
}

func (t *tenure) finish() {
	w := t.w
	w.met.inFlight.Dec()
	t.inflight.done()
	w.inflight.done()
	<-w.sem
}

// async runs fn in a tracked goroutine with a timeout (see admit). It
// returns false, having answered not_owner, when the tenure or the worker
// no longer admits requests.
func (t *tenure) async(m *nats.Msg, timeout time.Duration, fn func(ctx context.Context)) bool {
	if !t.admit() {
		respondError(m, 503, protocol.NotOwner.Code)
		return false
	}
	t.w.runners.run(func() {
		defer t.finish()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		fn(ctx)
	})
	return true
}

// charge decides charges (refs[i], lims[i]) at now, all or nothing, and
// applies them when every one is admitted. t.mu must be held.
func (t *tenure) charge(refs []bucketRef, lims []gcra.Limit, decs []gcra.Decision, now int64) (allowed bool, retry time.Duration) {
	allowed, retry = gcra.Decide(lims, func(i int) int64 { return t.tat(&refs[i], lims[i]) }, now, decs)
	if allowed {
		for i := range refs {
			t.state.set(&refs[i], decs[i].TAT, now)
		}
	}
	return allowed, retry
}

// hit serves a JSON hit (valid, routed to t) with the decision core of
// batch frames (decide.go): its charges under the lock, then its claim, if
// any, in a goroutine that replies when the claim is written.
func (t *tenure) hit(m *nats.Msg, r *protocol.HitRequest, timeout time.Duration) {
	it := hitItem(r, t.n, timeout.Milliseconds())
	var sc chargeScratch
	now := gcra.Micros(t.w.cfg.Now())
	t.mu.Lock()
	a, j, _ := t.decide(&it, 0, now, &sc, nil)
	t.mu.Unlock()
	if j == nil {
		t.w.met.hit(answerMetric(&a))
		respondAnswer(m, &a, r.Charges)
		return
	}
	j.msg, j.kinds = m, r.Charges
	if !t.admit() {
		t.refund(j.refs, j.lims) // answered not_owner: nothing spent
		respondError(m, 503, protocol.NotOwner.Code)
		return
	}
	t.w.runners.run(j.run)
}

// refund gives back charges that were applied (duplicate, pending, error).
func (t *tenure) refund(refs []bucketRef, lims []gcra.Limit) {
	now := gcra.Micros(t.w.cfg.Now())
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range refs {
		tat := t.state.get(&refs[i])
		if tat == 0 {
			continue // full (reset or swept meanwhile)
		}
		t.state.set(&refs[i], lims[i].Refund(tat, now), now)
	}
}

// reset forgets a tenant's buckets (they become full).
func (t *tenure) reset(tenant string) {
	t.mu.Lock()
	t.state.reset(tenant)
	t.mu.Unlock()
}

// sweep drops full buckets and idle counters.
func (t *tenure) sweep() {
	now := gcra.Micros(t.w.cfg.Now())
	idle := time.Now().Add(-counterIdle)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state.sweep(now)
	for k, c := range t.counters {
		if c.refs == 0 && c.used.Before(idle) {
			delete(t.counters, k)
		}
	}
}

// limitOf is a charge's bucket after the decision d; applied: the hit's
// charges were taken.
func limitOf(inc int64, d gcra.Decision, applied bool) frame.Limit {
	rem := d.Remaining
	if !applied {
		// Nothing was charged: what is left at this instant.
		rem = 0
		if d.Allowed {
			rem = d.Remaining + 1
		}
	}
	reset := d.ResetAfter
	if !applied && d.Allowed && inc > 0 {
		reset -= time.Duration(inc) * time.Microsecond
	}
	return frame.Limit{Remaining: rem, ResetMs: timeconv.CeilMs(max(0, reset))}
}

// maxOwnerTimeout bounds the KV calls of one request, whatever the
// caller's budget.
const maxOwnerTimeout = 30 * time.Second

// counterIdle is how long an unused counter stays cached.
const counterIdle = time.Minute

// counter is the cached state of one reserve/release counter. Operations on
// one counter are serialized by mu; different counters run in parallel.
type counter struct {
	mu     sync.Mutex
	refs   int       // tenure.mu
	used   time.Time // tenure.mu
	loaded bool
	count  int64            // anonymous slots
	slots  map[string]int64 // named slots (request ids) -> expiry, Unix ms
	rev    uint64           // revision of the live value; 0: none (create)
	ttl    time.Duration    // TTL of the stored value
	fresh  time.Time        // the cache is known valid until then
}

func (t *tenure) counterRef(key string) *counter {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counters[key]
	if c == nil {
		c = &counter{}
		t.counters[key] = c
	}
	c.refs++
	return c
}

func (t *tenure) counterUnref(c *counter) {
	t.mu.Lock()
	c.refs--
	c.used = time.Now()
	t.mu.Unlock()
}

// counterReply is the reply of any counter op (reserve fills Granted).
type counterReply struct {
	granted bool
	count   int64
}

func (t *tenure) counterOp(ctx context.Context, m *nats.Msg, req *quota.OwnerRequest) {
	w := t.w
	var principal, name string
	if req.Op == quota.OpReserve {
		principal, name = req.Reserve.Principal, req.Reserve.Key
	} else {
		principal, name = req.Counter.Principal, req.Counter.Key
	}
	key := quota.CounterKey(principal, name)
	c := t.counterRef(key)
	c.mu.Lock()
	rep, err := t.applyCounter(ctx, c, key, req)
	c.mu.Unlock()
	t.counterUnref(c)
	if err == nil && rep.granted {
		// A grant is answered once its count's write is durable (WithSync),
		// outside the counter's lock. A denial and a release are not synced:
		// a lost one only overcounts (refusing until a release or the TTL),
		// and the next grant's round makes it durable.
		err = durability.SyncWith(ctx, w.cfg.Sync)
	}
	if err != nil {
		w.met.counterOps.WithLabelValues(req.Op, "unavailable").Inc()
		respondError(m, 503, "counts: "+err.Error())
		return
	}
	switch req.Op {
	case quota.OpReserve:
		result := "granted"
		if !rep.granted {
			result = "denied"
		}
		w.met.counterOps.WithLabelValues(req.Op, result).Inc()
		respondJSON(m, protocol.ReserveReply{Granted: rep.granted, Count: rep.count})
	default:
		w.met.counterOps.WithLabelValues(req.Op, "ok").Inc()
		respondJSON(m, protocol.CountReply{Count: rep.count})
	}
}

// applyCounter runs one op on c (locked): load if needed, decide, write
// through by CAS+TTL, and on a conflict reload and decide again.
func (t *tenure) applyCounter(ctx context.Context, c *counter, key string, req *quota.OwnerRequest) (counterReply, error) {
	w := t.w
	for range 4 {
		if !c.loaded || !time.Now().Before(c.fresh) {
			if err := t.loadCounter(ctx, c, key); err != nil {
				return counterReply{}, err
			}
		}
		now := w.cfg.Now()
		nowMs := now.UnixMilli()
		for id, exp := range c.slots {
			if exp <= nowMs {
				delete(c.slots, id) // a named slot past its own TTL
			}
		}
		total := c.count + int64(len(c.slots))
		next, slots := c.count, c.slots
		var ttl time.Duration
		switch req.Op {
		case quota.OpCount:
			return counterReply{count: total}, nil
		case quota.OpReserve:
			ttl = quota.DurationMs(req.Reserve.TTLMs, w.cfg.CountTTL)
			id := req.Reserve.RequestID
			_, held := c.slots[id]
			switch {
			case id != "" && held: // a retry, or the holder renewing it
			case total >= req.Reserve.Max:
				return counterReply{count: total}, nil
			case id == "":
				next++
			}
			if id != "" {
				slots = maps.Clone(c.slots)
				if slots == nil {
					slots = make(map[string]int64, 1)
				}
				slots[id] = now.Add(ttl).UnixMilli()
			}
		case quota.OpRelease:
			ttl = c.ttl
			if ttl <= 0 {
				ttl = w.cfg.CountTTL
			}
			id := req.Counter.RequestID
			if _, held := c.slots[id]; id != "" && held {
				slots = maps.Clone(c.slots)
				delete(slots, id)
			} else if id != "" || c.count <= 0 {
				return counterReply{count: total}, nil // released already (or never held)
			} else {
				next--
			}
		}
		for _, exp := range slots {
			ttl = max(ttl, time.Duration(exp-nowMs)*time.Millisecond) // the value outlives its slots
		}
		ttl = kvstore.RoundTTL(ttl)
		val := encodeCounter(next, slots)
		sent := time.Now()
		var rev uint64
		var err error
		if c.rev == 0 {
			rev, _, err = w.counts.Create(ctx, key, val, ttl)
		} else {
			rev, err = w.counts.Update(ctx, key, val, c.rev, ttl)
		}
		switch {
		case err == nil:
			c.count, c.slots, c.rev, c.ttl, c.fresh = next, slots, rev, ttl, sent.Add(ttl)
			return counterReply{granted: req.Op == quota.OpReserve, count: next + int64(len(slots))}, nil
		case errors.Is(err, kvstore.ErrExists), errors.Is(err, kvstore.ErrWrongLastSequence):
			c.loaded = false // another writer (a stale or new owner) or an expiry: reload
		default:
			c.loaded = false
			return counterReply{}, err
		}
	}
	return counterReply{}, errors.New("counter contended")
}

// loadCounter reads the counter's live value (absent: 0).
func (t *tenure) loadCounter(ctx context.Context, c *counter, key string) error {
	rec, err := t.w.counts.GetLeader(ctx, key) // not a lagging replica: the count decides grants
	switch {
	case errors.Is(err, kvstore.ErrNotFound):
		c.count, c.slots, c.rev, c.ttl, c.fresh = 0, nil, 0, 0, time.Now().Add(counterIdle)
	case err != nil:
		return err
	default:
		n, slots, _ := decodeCounter(rec.Value) // unreadable: empty, overwritten by CAS
		c.count, c.slots, c.rev, c.ttl = n, slots, rec.Revision, rec.TTL
		c.fresh = time.Now().Add(counterIdle)
		if exp := rec.ExpiresAt(); !exp.IsZero() {
			c.fresh = exp
		}
	}
	c.loaded = true
	return nil
}
