package quota

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// Client-side coalescing of hits (docs/DESIGN.md "Partition-owning workers"):
// concurrent hits bound for one owner travel in one batch frame and are
// answered in one reply. There is no timer: a lane (one per destination
// subject) sends at once while it has fewer than laneWindow frames
// awaiting their first reply, and otherwise gathers what arrives until one
// of them is answered — so a lone hit is never delayed, and under load the
// batch is whatever accumulated during the previous round trip.
//
// Destinations: a hit first goes to its partition's subject (one lane per
// partition); owners name their member subject in every reply, and the
// client then sends the hits of every partition that owner answered for to
// that subject (one lane per owner), which is what makes batches large
// when load is spread over many partitions. An item answered not_owner, or
// a frame nobody receives, sends the partition back to its partition
// subject.
const (
	// laneWindow is how many frames a lane has awaiting their first reply
	// before it gathers.
	laneWindow = 2
	// maxBatch bounds the items of one frame.
	maxBatch = 256
	// legacyFor is how long a partition whose owner answered a frame with
	// an error header (a version without frames) gets JSON requests.
	legacyFor = 10 * time.Second
	// maxItemBytes: a hit whose strings are longer than this in all goes
	// as JSON (a frame of maxBatch items stays well under NATS's default
	// 1 MiB max payload).
	maxItemBytes = 3 << 10
	// slotHold bounds how long a frame without any reply keeps its lane
	// slot: the window paces the owner, it must not wait for a lost frame.
	slotHold = 20 * time.Millisecond
)

// Outcome of a call beyond the frame's statuses.
const (
	stRetry   = 10 // no responders (or not_owner): retry after a backoff
	stLegacy  = 11 // the owner does not speak frames: send as JSON
	stTimeout = 12 // the frame got no reply within its deadline
	stFailed  = 13 // publish failed or the reply was malformed (reason)
)

// States of a hitCall: it leaves callWaiting once, for callAnswered (its
// answer came) or callAbandoned (its caller gave up first).
const (
	callWaiting uint32 = iota
	callAnswered
	callAbandoned
)

// hitCall is one Hit waiting in a lane or a frame.
type hitCall struct {
	req      *HitRequest
	n        int
	deadline time.Time
	state    atomic.Uint32 // callWaiting, callAnswered or callAbandoned
	done     chan struct{}

	// Set before done is signalled.
	status byte
	reason string
	rep    HitReply
}

// complete answers the call unless its caller gave up; the fields are
// written only by the winner of the CAS.
func (c *hitCall) complete(status byte, reason string, rep HitReply) {
	if !c.state.CompareAndSwap(callWaiting, callAnswered) {
		return
	}
	c.status, c.reason, c.rep = status, reason, rep
	c.done <- struct{}{}
}

// lane is one destination subject's queue.
type lane struct {
	subject string
	mu      sync.Mutex
	queue   []*hitCall
	waiting int // frames sent and not yet answered at all
}

// frameBatch is one frame in flight.
type frameBatch struct {
	id    uint64
	lane  *lane
	calls []*hitCall
	sent  time.Time
	timer *time.Timer

	mu       sync.Mutex
	left     int  // calls without an answer
	released bool // the lane's window slot was given back
	done     bool // finished: forgotten, every call answered
}

type coalescer struct {
	nc    *nats.Conn
	parts []*lane                // partition -> its partition lane
	route []atomic.Pointer[lane] // partition -> the lane its hits take
	// legacy[n]: until when (UnixNano) partition n gets JSON requests.
	legacy []atomic.Int64

	mu      sync.Mutex
	inbox   string // "<inbox>." — reply subjects are inbox + frame id
	sub     *nats.Subscription
	batches map[uint64]*frameBatch
	members map[string]*lane
	seq     uint64

	frames, items atomic.Int64 // sent, for benchmarks
}

func newCoalescer(nc *nats.Conn, subjects []string) *coalescer {
	co := &coalescer{
		nc:      nc,
		parts:   make([]*lane, len(subjects)),
		route:   make([]atomic.Pointer[lane], len(subjects)),
		legacy:  make([]atomic.Int64, len(subjects)),
		batches: make(map[uint64]*frameBatch),
		members: make(map[string]*lane),
	}
	for n, s := range subjects {
		co.parts[n] = &lane{subject: s}
		co.route[n].Store(co.parts[n])
	}
	return co
}

// start subscribes the reply inbox once.
func (co *coalescer) start() error {
	co.mu.Lock()
	defer co.mu.Unlock()
	if co.sub != nil {
		return nil
	}
	inbox := co.nc.NewInbox() + "."
	sub, err := co.nc.Subscribe(inbox+"*", co.onReply)
	if err != nil {
		return err
	}
	_ = sub.SetPendingLimits(-1, -1) // replies are bounded by the frames in flight
	co.inbox, co.sub = inbox, sub
	return nil
}

// isLegacy reports whether partition n's owner is known not to speak frames.
func (co *coalescer) isLegacy(n int) bool {
	until := co.legacy[n].Load()
	return until != 0 && time.Now().UnixNano() < until
}

// hit sends r as one item of a frame and waits for its answer, ctx, or
// the deadline (which the frame's timer enforces: ctx may have none).
func (co *coalescer) hit(ctx context.Context, n int, r *HitRequest, deadline time.Time) (byte, string, HitReply) {
	c := &hitCall{req: r, n: n, deadline: deadline, done: make(chan struct{}, 1)}
	co.enqueue(co.route[n].Load(), c)
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return stTimeout, ctx.Err().Error(), HitReply{}
		}
		<-c.done // answered meanwhile
	}
	return c.status, c.reason, c.rep
}

func (co *coalescer) enqueue(l *lane, c *hitCall) {
	l.mu.Lock()
	l.queue = append(l.queue, c)
	if l.waiting >= laneWindow && len(l.queue) < maxBatch {
		l.mu.Unlock()
		return
	}
	calls := l.take()
	l.waiting++
	l.mu.Unlock()
	co.send(l, calls)
}

// take removes up to maxBatch calls from the queue (l.mu held).
func (l *lane) take() []*hitCall {
	k := min(len(l.queue), maxBatch)
	calls := make([]*hitCall, k)
	copy(calls, l.queue)
	rest := copy(l.queue, l.queue[k:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	return calls
}

// release gives a window slot back and sends what gathered meanwhile.
func (co *coalescer) release(l *lane) {
	l.mu.Lock()
	if len(l.queue) == 0 {
		l.waiting--
		l.mu.Unlock()
		return
	}
	calls := l.take() // the slot passes on to the next frame
	l.mu.Unlock()
	co.send(l, calls)
}

var framePool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// send publishes calls as one frame. The lane slot it holds is released
// by the frame's first reply, its expiry, or a failed publish.
func (co *coalescer) send(l *lane, calls []*hitCall) {
	now := time.Now()
	live := calls[:0]
	earliest := time.Time{}
	for _, c := range calls {
		switch {
		case c.state.Load() != callWaiting:
			continue // the caller gave up
		case !now.Before(c.deadline):
			c.complete(stTimeout, "deadline passed before sending", HitReply{})
			continue
		}
		live = append(live, c)
		if earliest.IsZero() || c.deadline.Before(earliest) {
			earliest = c.deadline
		}
	}
	if len(live) == 0 {
		co.release(l)
		return
	}
	co.mu.Lock()
	co.seq++
	b := &frameBatch{id: co.seq, lane: l, calls: live, left: len(live)}
	co.batches[b.id] = b
	reply := co.inbox + strconv.FormatUint(b.id, 10)
	co.mu.Unlock()

	co.frames.Add(1)
	co.items.Add(int64(len(live)))
	bp := framePool.Get().(*[]byte)
	buf := frame.AppendRequestHeader((*bp)[:0], len(live))
	for _, c := range live {
		buf = appendHitItem(buf, c.n, max(1, c.deadline.Sub(now).Milliseconds()), c.req)
	}
	// The frame's timer answers each item at its deadline (callers whose
	// context has none rely on it) and gives the lane slot back after
	// slotHold without a reply (a frame lost with a subscription that went
	// away must not stall the lane).
	b.sent = now
	b.mu.Lock()
	b.timer = time.AfterFunc(min(slotHold, earliest.Sub(now)), func() { co.onTimer(b) })
	b.mu.Unlock()
	if mp := co.nc.MaxPayload(); mp > 0 && int64(len(buf)) > mp {
		// A server with a small max payload: these go as JSON.
		framePool.Put(bp)
		co.finish(b, stLegacy, "frame over the server's max payload")
		return
	}
	err := co.nc.PublishMsg(&nats.Msg{Subject: l.subject, Reply: reply, Data: buf})
	*bp = buf
	framePool.Put(bp)
	if err != nil {
		co.finish(b, stFailed, "publish: "+err.Error())
	}
}

// onTimer answers the items of b whose deadline has passed (stTimeout),
// releases b's lane slot if its first reply is later than slotHold, and
// re-arms for the next of these; with no item left waiting, b is done.
func (co *coalescer) onTimer(b *frameBatch) {
	now := time.Now()
	var expired []*hitCall
	var earliest time.Time
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	for _, c := range b.calls {
		if c.state.Load() != callWaiting {
			continue
		}
		if !now.Before(c.deadline) {
			expired = append(expired, c)
		} else if earliest.IsZero() || c.deadline.Before(earliest) {
			earliest = c.deadline
		}
	}
	if earliest.IsZero() {
		b.mu.Unlock()
		co.finish(b, stTimeout, "no reply from "+b.lane.subject)
		return
	}
	release := false
	if !b.released {
		if hold := b.sent.Add(slotHold); now.Before(hold) {
			earliest = minTime(earliest, hold)
		} else {
			release, b.released = true, true
		}
	}
	b.timer.Reset(earliest.Sub(now))
	b.mu.Unlock()
	for _, c := range expired {
		c.complete(stTimeout, "no reply from "+b.lane.subject+" by the deadline", HitReply{})
	}
	if release {
		co.release(b.lane)
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// finish answers every call of b still waiting with status, forgets b and
// releases its lane slot if its first reply never came.
func (co *coalescer) finish(b *frameBatch, status byte, reason string) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done = true
	release := !b.released
	b.released = true
	if b.timer != nil {
		b.timer.Stop()
	}
	b.mu.Unlock()
	co.mu.Lock()
	delete(co.batches, b.id)
	co.mu.Unlock()
	for _, c := range b.calls {
		if status == stRetry {
			co.forget(c.n)
		}
		c.complete(status, reason, HitReply{})
	}
	if release {
		co.release(b.lane)
	}
}

// onReply is the inbox callback: one reply (of possibly several) to a frame.
func (co *coalescer) onReply(m *nats.Msg) {
	i := strings.LastIndexByte(m.Subject, '.')
	id, err := strconv.ParseUint(m.Subject[i+1:], 10, 64)
	if err != nil {
		return
	}
	co.mu.Lock()
	b := co.batches[id]
	co.mu.Unlock()
	if b == nil {
		return // expired or finished
	}
	if !frame.Is(m.Data) {
		co.onHeaderReply(b, m)
		return
	}
	f, err := frame.DecodeReply(m.Data)
	if err != nil {
		co.finish(b, stFailed, fmt.Sprintf("malformed reply from %s", b.lane.subject))
		return
	}
	var learned *lane
	if len(f.Route) > 0 && string(f.Route) != b.lane.subject {
		learned = co.memberLane(f.Route)
	}
	var a frame.ReplyAnswer
	answered := 0
	for range f.Count {
		if err := f.Next(&a); err != nil || a.Index >= len(b.calls) {
			co.finish(b, stFailed, fmt.Sprintf("malformed reply from %s", b.lane.subject))
			return
		}
		c := b.calls[a.Index]
		if a.Status == frame.StatusNotOwner {
			co.forget(c.n)
			c.complete(stRetry, reasonNotOwner, HitReply{})
		} else {
			if learned != nil {
				co.route[c.n].Store(learned)
			}
			c.complete(a.Status, string(a.Reason), decodeHitReply(&a, c.req))
		}
		answered++
	}
	if !f.Done() {
		co.finish(b, stFailed, fmt.Sprintf("malformed reply from %s", b.lane.subject))
		return
	}
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return // expired meanwhile
	}
	b.left -= answered
	if b.left > 0 && f.More {
		release := !b.released
		b.released = true
		b.mu.Unlock()
		if release {
			co.release(b.lane) // the owner has decided what it could: send the next frame
		}
		return
	}
	b.mu.Unlock()
	// Every item answered (or the owner says nothing more follows, and
	// whatever is left fails rather than waiting for its deadline).
	co.finish(b, stFailed, "owner of "+b.lane.subject+" sent no answer")
}

// onHeaderReply handles a reply that is not a frame: no responders, or an
// error header from an owner that does not speak frames (it answers 400 to
// what is not JSON) or that is not serving (503 not_owner).
func (co *coalescer) onHeaderReply(b *frameBatch, m *nats.Msg) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		co.finish(b, stRetry, "no responders")
		return
	}
	code, reason := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
	switch {
	case code == "503" && reason == reasonNotOwner:
		co.finish(b, stRetry, reasonNotOwner)
	case code == "400":
		until := time.Now().Add(legacyFor).UnixNano()
		for _, c := range b.calls {
			co.legacy[c.n].Store(until)
		}
		co.finish(b, stLegacy, reason)
	default:
		co.finish(b, frame.StatusUnavailable, "owner of "+b.lane.subject+" answered "+code+" "+reason)
	}
}

// memberLane returns the lane of a member subject.
func (co *coalescer) memberLane(route []byte) *lane {
	co.mu.Lock()
	defer co.mu.Unlock()
	l := co.members[string(route)]
	if l == nil {
		l = &lane{subject: string(route)}
		co.members[l.subject] = l
	}
	return l
}

// forget sends partition n's hits to its partition subject again.
func (co *coalescer) forget(n int) {
	co.route[n].Store(co.parts[n])
}

// frameable reports whether r is small enough for a frame.
func frameable(r *HitRequest) bool {
	n := 0
	for i := range r.Charges {
		n += len(r.Charges[i].Kind) + len(r.Charges[i].Tenant)
	}
	if c := r.Claim; c != nil {
		n += len(c.Tenant) + len(c.Source) + len(c.Key) + len(c.HookID)
	}
	return n <= maxItemBytes
}

// decodeHitReply builds the HitReply of an answered item.
func decodeHitReply(a *frame.ReplyAnswer, r *HitRequest) HitReply {
	if a.Status != frame.StatusAnswered {
		return HitReply{}
	}
	rep := HitReply{
		Result:       resultCodes[a.Result],
		RetryAfterMs: a.RetryMs,
		Revision:     a.Revision,
	}
	if len(a.HookID) > 0 {
		rep.HookID = string(a.HookID)
	}
	if a.NLimits > 0 {
		rep.Limits = make([]LimitState, a.NLimits)
		for i := range a.NLimits {
			l := a.Limits[i]
			rep.Limits[i] = LimitState{Remaining: l.Remaining, ResetAfterMs: l.ResetMs}
			if i < len(r.Charges) {
				rep.Limits[i].Kind = r.Charges[i].Kind
			}
		}
	}
	return rep
}
