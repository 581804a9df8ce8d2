// Package coalesce is the quota Router's coalescing of concurrent hits
// into batch frames (quota/internal/frame): lanes per destination, frames in
// flight, their replies and deadlines. It knows frames, not requests: a
// hit is an Item that appends itself to a frame, and its answer comes back
// as an Answer.
package coalesce

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

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// Coalescing of hits (docs/DESIGN.md "The path of a hit"): concurrent hits
// bound for one owner travel in one batch frame, answered in one reply.
// There is no timer: a lane (one per destination subject) sends at once
// while fewer than laneWindow frames await their first reply, else gathers
// until one is answered, so a lone hit is never delayed and under load the
// batch is what accumulated during the last round trip. A hit goes to its
// partition's subject until a reply names the owner's member subject (one
// lane per owner: large batches when load spreads over partitions); a
// not_owner item or an unreceived frame sends it back there.
const (
	// laneWindow is how many frames a lane has awaiting their first reply
	// before it gathers.
	laneWindow = 2
	// maxBatch bounds the items of one frame.
	maxBatch = 256
	// slotHold bounds how long a frame without any reply keeps its lane
	// slot: the window paces the owner, it must not wait for a lost frame.
	slotHold = 20 * time.Millisecond
)

// Outcomes of a call beyond the frame's statuses (frame.Status*).
const (
	Retry   frame.Status = 10 // no responders (or not_owner): retry after a backoff
	TooBig  frame.Status = 11 // the frame is over the server's max payload: a hit goes as JSON
	Timeout frame.Status = 12 // the frame got no reply within its deadline
	Failed  frame.Status = 13 // publish failed or the reply was malformed (reason)
)

// MaxItemBytes: a hit whose strings are longer than this in all goes as
// JSON (a frame of maxBatch items stays well under NATS's default 1 MiB
// max payload).
const MaxItemBytes = 3 << 10

// Item is one hit or settle as the Coalescer sends it.
type Item interface {
	// AppendItem appends the item for partition n with timeoutMs left of
	// its deadline (frame.AppendHitHead and what follows, or
	// frame.AppendSettle).
	AppendItem(b []byte, n int, timeoutMs int64) []byte
}

// Answer is a call's outcome: its status (frame.Status* or Retry, TooBig,
// Timeout, Failed), and for frame.StatusAnswered the item's answer, copied
// out of the reply.
type Answer struct {
	Status   frame.Status
	Reason   string
	Result   frame.Result
	HookID   string
	RetryMs  int64
	Revision uint64
	NLimits  int
	Limits   [protocol.MaxCharges]frame.Limit
}

// AnswerOf copies a decoded answer out of its reply frame.
func AnswerOf(a *frame.ReplyAnswer) Answer {
	out := Answer{Status: a.Status, Reason: string(a.Reason)}
	if a.Status == frame.StatusAnswered {
		out.Result, out.RetryMs, out.Revision, out.NLimits, out.Limits = a.Result, a.RetryMs, a.Revision, a.NLimits, a.Limits
		if len(a.HookID) > 0 {
			out.HookID = string(a.HookID)
		}
	}
	return out
}

// States of a hitCall: it leaves callWaiting once, for callAnswered (its
// answer came) or callAbandoned (its caller gave up first).
const (
	callWaiting uint32 = iota
	callAnswered
	callAbandoned
)

// hitCall is one Hit waiting in a lane or a frame.
type hitCall struct {
	item     Item
	n        int
	deadline time.Time
	state    atomic.Uint32 // callWaiting, callAnswered or callAbandoned
	done     chan struct{}

	ans Answer // set before done is signalled
}

// complete answers the call unless its caller gave up; the fields are
// written only by the winner of the CAS.
func (c *hitCall) complete(a Answer) {
	if !c.state.CompareAndSwap(callWaiting, callAnswered) {
		return
	}
	c.ans = a
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

// Coalescer coalesces the hits of one client. Safe for concurrent use.
type Coalescer struct {
	nc    *nats.Conn
	parts []*lane                // partition -> its partition lane
	route []atomic.Pointer[lane] // partition -> the lane its hits take

	// isMember accepts a subject an owner's reply names as its route: only
	// the prefix's member subjects, never another subject a reply could
	// send this client's hits to.
	isMember func(subject []byte) bool

	mu      sync.Mutex
	inbox   string // "<inbox>." — reply subjects are inbox + frame id
	sub     *nats.Subscription
	batches map[uint64]*frameBatch
	members map[string]*lane // at most len(parts): one owner holds at least one partition
	seq     uint64

	frames, items atomic.Int64 // sent, for benchmarks
}

// New returns a coalescer sending to subjects (partition n's subject at
// index n) over nc. isMember tells the member subjects a reply may route
// later hits to; a reply naming any other subject is answered but not
// followed.
func New(nc *nats.Conn, subjects []string, isMember func(subject []byte) bool) *Coalescer {
	co := &Coalescer{
		nc:       nc,
		isMember: isMember,
		parts:    make([]*lane, len(subjects)),
		route:    make([]atomic.Pointer[lane], len(subjects)),
		batches:  make(map[uint64]*frameBatch),
		members:  make(map[string]*lane),
	}
	for n, s := range subjects {
		co.parts[n] = &lane{subject: s}
		co.route[n].Store(co.parts[n])
	}
	return co
}

// Start subscribes the reply inbox once.
func (co *Coalescer) Start() error {
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

// Send sends it as one item of a frame for partition n and waits for its
// answer, ctx, or the deadline (which the frame's timer enforces: ctx may
// have none).
func (co *Coalescer) Send(ctx context.Context, n int, it Item, deadline time.Time) Answer {
	c := &hitCall{item: it, n: n, deadline: deadline, done: make(chan struct{}, 1)}
	co.enqueue(co.route[n].Load(), c)
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return Answer{Status: Timeout, Reason: ctx.Err().Error()}
		}
		<-c.done // answered meanwhile
	}
	return c.ans
}

func (co *Coalescer) enqueue(l *lane, c *hitCall) {
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
func (co *Coalescer) release(l *lane) {
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
func (co *Coalescer) send(l *lane, calls []*hitCall) {
	now := time.Now()
	live := calls[:0]
	earliest := time.Time{}
	for _, c := range calls {
		switch {
		case c.state.Load() != callWaiting:
			continue // the caller gave up
		case !now.Before(c.deadline):
			c.complete(Answer{Status: Timeout, Reason: "deadline passed before sending"})
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
		buf = c.item.AppendItem(buf, c.n, max(1, c.deadline.Sub(now).Milliseconds()))
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
		co.finish(b, TooBig, "frame over the server's max payload")
		return
	}
	err := co.nc.PublishMsg(&nats.Msg{Subject: l.subject, Reply: reply, Data: buf})
	*bp = buf
	framePool.Put(bp)
	if err != nil {
		co.finish(b, Failed, "publish: "+err.Error())
	}
}

// onTimer answers the items of b whose deadline has passed (Timeout),
// releases b's lane slot if its first reply is later than slotHold, and
// re-arms for the next of these; with no item left waiting, b is done.
func (co *Coalescer) onTimer(b *frameBatch) {
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
		co.finish(b, Timeout, "no reply from "+b.lane.subject)
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
		c.complete(Answer{Status: Timeout, Reason: "no reply from " + b.lane.subject + " by the deadline"})
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
func (co *Coalescer) finish(b *frameBatch, status frame.Status, reason string) {
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
		if status == Retry {
			co.forget(c.n)
		}
		c.complete(Answer{Status: status, Reason: reason})
	}
	if release {
		co.release(b.lane)
	}
}

// onReply is the inbox callback: one reply (of possibly several) to a frame.
func (co *Coalescer) onReply(m *nats.Msg) {
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
		co.finish(b, Failed, fmt.Sprintf("malformed reply from %s", b.lane.subject))
		return
	}
	var learned *lane
	if len(f.Route) > 0 && string(f.Route) != b.lane.subject && co.isMember(f.Route) {
		learned = co.memberLane(f.Route)
	}
	var a frame.ReplyAnswer
	answered := 0
	for range f.Count {
		if err := f.Next(&a); err != nil || a.Index >= len(b.calls) {
			co.finish(b, Failed, fmt.Sprintf("malformed reply from %s", b.lane.subject))
			return
		}
		c := b.calls[a.Index]
		if a.Status == frame.StatusNotOwner {
			co.forget(c.n)
			c.complete(Answer{Status: Retry, Reason: protocol.NotOwner.Code})
		} else {
			if learned != nil {
				co.route[c.n].Store(learned)
			}
			c.complete(AnswerOf(&a))
		}
		answered++
	}
	if !f.Done() {
		co.finish(b, Failed, fmt.Sprintf("malformed reply from %s", b.lane.subject))
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
	co.finish(b, Failed, "owner of "+b.lane.subject+" sent no answer")
}

// onHeaderReply handles a reply that is not a frame: no responders, or an
// error header from an owner that does not speak frames (it answers 400 to
// what is not JSON) or that is not serving (503 not_owner).
func (co *Coalescer) onHeaderReply(b *frameBatch, m *nats.Msg) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		co.finish(b, Retry, "no responders")
		return
	}
	code, reason := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader)
	switch {
	case code == "503" && reason == protocol.NotOwner.Code:
		co.finish(b, Retry, protocol.NotOwner.Code)
	default:
		co.finish(b, frame.StatusUnavailable, "owner of "+b.lane.subject+" answered "+code+" "+reason)
	}
}

// memberLane returns the lane of a member subject, or nil when the member
// table is full of lanes that partitions still route to. The table holds
// at most one lane per partition: lanes no partition routes to are
// dropped to make room (their frames in flight keep them), so an owner
// advertising ever new member subjects cannot grow it.
func (co *Coalescer) memberLane(route []byte) *lane {
	co.mu.Lock()
	defer co.mu.Unlock()
	if l := co.members[string(route)]; l != nil {
		return l
	}
	if len(co.members) >= len(co.parts) {
		used := make(map[*lane]bool, len(co.route))
		for i := range co.route {
			used[co.route[i].Load()] = true
		}
		for s, l := range co.members {
			if !used[l] {
				delete(co.members, s)
			}
		}
		if len(co.members) >= len(co.parts) {
			return nil
		}
	}
	l := &lane{subject: string(route)}
	co.members[l.subject] = l
	return l
}

// Members is the number of member lanes known (for tests).
func (co *Coalescer) Members() int {
	co.mu.Lock()
	defer co.mu.Unlock()
	return len(co.members)
}

// forget sends partition n's hits to its partition subject again.
func (co *Coalescer) forget(n int) {
	co.route[n].Store(co.parts[n])
}

// Frames and Items count the frames sent and the items in them (for
// benchmarks and tests).
func (co *Coalescer) Frames() int64 { return co.frames.Load() }

// Items: see Frames.
func (co *Coalescer) Items() int64 { return co.items.Load() }

// Hold makes the lane of partition n gather (as if its window were full),
// for tests: queued reports the calls gathered, flush sends them as one
// frame.
func (co *Coalescer) Hold(n int) (queued func() int, flush func()) {
	l := co.route[n].Load()
	l.mu.Lock()
	l.waiting = laneWindow
	l.mu.Unlock()
	queued = func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.queue)
	}
	return queued, func() {
		l.mu.Lock()
		l.waiting = 1 // the slot flush's frame takes
		l.mu.Unlock()
		co.release(l)
	}
}
