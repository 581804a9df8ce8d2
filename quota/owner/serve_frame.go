package owner

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/internal/frame"
)

// frameScratch is the reusable state of serving one frame.
type frameScratch struct {
	items   []frame.Item
	answers []frame.Answer
	limits  []frame.Limit
	charges chargeScratch
	claims  []*claimJob
	settles []*settleJob
	buf     []byte
}

var scratchPool = sync.Pool{New: func() any { return new(frameScratch) }}

// claimBatch collects the answers of a frame's claims and settles and
// sends them together: when the last of a kind is done (creates do not wait
// for settles' syncs, nor the other way round), or claimLinger after an
// answer is ready while others of its kind still wait on KV.
type claimBatch struct {
	w       *Worker
	reply   string
	answers []frame.Answer // by job slot; written by the job before it reports
	claims  int            // slots below are claims', the others settles'

	mu      sync.Mutex // held while a reply is built and published (replies stay in order)
	left    int
	kinds   [2]int // left of each kind: claims, settles
	pending []int  // slots answered and not yet sent
	timer   *time.Timer
}

// claimLinger bounds how long a claim's answer waits for the other claims
// of its frame.
const claimLinger = time.Millisecond

// serveFrame serves a batch frame on the member or a partition subject:
// every hit is decided by its partition's tenure (one lock acquisition per
// run of items of one partition) and answered in one reply; claims and
// settles are answered together in later replies once their writes are
// done. An item whose partition is not served here is answered not_owner
// on its own; the client retries it alone.
func (w *Worker) serveFrame(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	fs := scratchPool.Get().(*frameScratch)
	defer fs.release()
	items, err := frame.DecodeRequest(m.Data, fs.items)
	fs.items = items
	if err != nil {
		respondError(m, 400, "invalid_request: "+err.Error())
		return
	}
	w.decideItems(fs)
	cb := w.admitClaims(fs, m.Reply)
	w.replyDecided(fs, m.Reply, cb != nil)
	w.startClaims(fs, cb)
}

// release returns fs to the pool.
func (fs *frameScratch) release() {
	clear(fs.claims) // the jobs outlive the frame
	fs.claims = fs.claims[:0]
	clear(fs.settles)
	fs.settles = fs.settles[:0]
	fs.answers = fs.answers[:0]
	scratchPool.Put(fs)
}

// decideItems decides every item of fs: invalid, misrouted and unowned
// items at once, the others by decide under their tenure's lock. Answers go
// to fs.answers, claims to fs.claims, settles (no lock) to fs.settles.
func (w *Worker) decideItems(fs *frameScratch) {
	now := gcra.Micros(w.cfg.Now())
	answers, limits := fs.answers[:0], fs.limits[:0]
	var cur *tenure
	unlock := func() {
		if cur != nil {
			cur.mu.Unlock()
			cur = nil
		}
	}
	for i := range fs.items {
		it := &fs.items[i]
		t, a, ok := w.routeItem(it, i)
		if !ok {
			answers = append(answers, a)
			continue
		}
		if it.Op == frame.OpSettle {
			fs.settles = append(fs.settles, t.newSettleJob(it, i))
			continue
		}
		if t != cur {
			unlock()
			t.mu.Lock()
			cur = t
		}
		a, job, l := t.decide(it, i, now, &fs.charges, limits)
		limits = l
		if job != nil {
			fs.claims = append(fs.claims, job)
			continue
		}
		w.met.hit(answerMetric(&a))
		answers = append(answers, a)
	}
	unlock()
	fs.answers, fs.limits = answers, limits
}

// routeItem finds the tenure that decides item it (the index-th): false with
// the item's answer when it is invalid, misrouted, or its partition is not
// served here.
func (w *Worker) routeItem(it *frame.Item, index int) (*tenure, frame.Answer, bool) {
	refuse := func(status frame.Status, reason string) (*tenure, frame.Answer, bool) {
		if it.Op == frame.OpSettle {
			w.met.settle(status)
		} else if status == frame.StatusInvalid {
			w.met.hit("invalid")
		}
		return nil, frame.Answer{Index: index, Status: status, Reason: reason}, false
	}
	if err := quota.ValidateItem(it); err != nil {
		return refuse(frame.StatusInvalid, err.Error())
	}
	if p := quota.Partition(it.Tenant, w.cfg.Partitions); p != it.N {
		return refuse(frame.StatusInvalid, misrouted(p, w.cfg.Partitions, it.N))
	}
	t := w.served[it.N].Load()
	if t == nil || !t.serving() {
		return refuse(frame.StatusNotOwner, protocol.NotOwner.Code)
	}
	return t, frame.Answer{}, true
}

// admitClaims admits the claims and settles of fs (this may wait for KV
// slots: back-pressure) and returns the batch that collects their answers
// (nil: none admitted). A refused claim is refunded and answered not_owner;
// a refused settle is answered not_owner (it charged nothing).
func (w *Worker) admitClaims(fs *frameScratch, reply string) *claimBatch {
	notOwner := func(item int) {
		fs.answers = append(fs.answers, frame.Answer{Index: item, Status: frame.StatusNotOwner, Reason: protocol.NotOwner.Code})
	}
	admitted := fs.claims[:0]
	for _, j := range fs.claims {
		if !j.t.admit() {
			j.t.refund(j.refs, j.lims)
			notOwner(j.item)
			continue
		}
		admitted = append(admitted, j)
	}
	clear(fs.claims[len(admitted):])
	fs.claims = admitted
	settles := fs.settles[:0]
	for _, j := range fs.settles {
		if !j.t.admit() {
			w.met.settle(frame.StatusNotOwner)
			notOwner(j.item)
			continue
		}
		settles = append(settles, j)
	}
	clear(fs.settles[len(settles):])
	fs.settles = settles
	n := len(admitted) + len(settles)
	if n == 0 {
		return nil
	}
	return &claimBatch{w: w, reply: reply, answers: make([]frame.Answer, n), claims: len(admitted), left: n, kinds: [2]int{len(admitted), len(settles)}}
}

// replyDecided publishes the immediate reply: every item decided so far;
// more: claims or settles are still to be answered. When the frame's only item waits
// on a claim there is nothing to say yet.
func (w *Worker) replyDecided(fs *frameScratch, reply string, more bool) {
	if len(fs.answers) == 0 && (!more || len(fs.items) == 1) {
		return
	}
	buf := frame.AppendReplyHeader(fs.buf[:0], more, w.route, len(fs.answers))
	for k := range fs.answers {
		buf = frame.AppendAnswer(buf, &fs.answers[k])
	}
	fs.buf = buf
	_ = w.nc.Publish(reply, buf)
}

// startClaims writes the admitted claims and settles of fs into their
// slots of cb. Claims the store can start (pipelined) all go out at once
// and one runner collects their acks in order (collectClaims); any other
// claim gets a runner of its own (claimJob.run).
func (w *Worker) startClaims(fs *frameScratch, cb *claimBatch) {
	var started []startedJob
	now := time.Now()
	for k, j := range fs.claims {
		j.batch, j.slot = cb, k
		deadline := now.Add(j.timeout)
		if c, err := w.store.StartClaim(j.id, j.hookID, j.pending); err == nil {
			if started == nil {
				started = make([]startedJob, 0, len(fs.claims)-k)
			}
			started = append(started, startedJob{j: j, c: c, deadline: deadline})
			continue
		}
		w.runners.run(j.run)
	}
	if len(started) > 0 {
		w.runners.run(func() { w.collectClaims(started) })
	}
	w.startSettles(fs, cb, len(fs.claims))
}

// startedJob is a claim job whose create is in flight.
type startedJob struct {
	j        *claimJob
	c        claims.StartedClaim
	deadline time.Time // the job's timeout from the start of its create
}

// collectClaims waits for the creates of started and completes their jobs,
// under one deadline, the frame's latest: one timer per frame, and it only
// ends the wait for an ack that never comes (a late ack still reports a
// taken claim). A refused create goes to a runner for the full path
// (claimJob.run: the store reads the holder).
func (w *Worker) collectClaims(started []startedJob) {
	deadline := started[0].deadline
	for _, s := range started[1:] {
		if s.deadline.After(deadline) {
			deadline = s.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for _, s := range started {
		res, done, err := s.c.Wait(ctx)
		if !done {
			w.runners.run(s.j.run)
			continue
		}
		s.j.complete(res, err)
	}
}

// done reports slot's answer ready.
func (b *claimBatch) done(slot int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left--
	kind := 0
	if slot >= b.claims {
		kind = 1
	}
	b.kinds[kind]--
	b.pending = append(b.pending, slot)
	switch {
	case b.left == 0 || b.kinds[kind] == 0:
		if b.timer != nil {
			b.timer.Stop()
			b.timer = nil // the other kind's answers may linger anew
		}
		b.sendLocked()
	case b.timer == nil:
		b.timer = time.AfterFunc(claimLinger, b.flush)
	}
}

func (b *claimBatch) flush() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = nil
	if len(b.pending) > 0 && b.left > 0 {
		b.sendLocked()
	}
}

// sendLocked publishes the pending answers (b.mu held).
func (b *claimBatch) sendLocked() {
	buf := frame.AppendReplyHeader(make([]byte, 0, 64+48*len(b.pending)), b.left > 0, b.w.route, len(b.pending))
	for _, k := range b.pending {
		buf = frame.AppendAnswer(buf, &b.answers[k])
	}
	b.pending = b.pending[:0]
	_ = b.w.nc.Publish(b.reply, buf)
}
