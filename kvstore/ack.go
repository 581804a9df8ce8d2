package kvstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/retry"
)

// The lean write path of a bucket (docs/DESIGN.md "Claims in KV"): every
// write is a plain NATS publish whose reply subject lies under one wildcard
// inbox subscription, and the pub ack is matched to its write by id and
// parsed without a generic JSON decode (only an error ack is decoded in
// full). A write in flight costs one map entry and one channel: none of the
// per-write subscription, future, timer or context of jetstream.PublishMsg.

// maxPendingAcks bounds the writes of one bucket awaiting their acks; a
// write beyond it is refused as unavailable (nothing is sent). Every
// waiter leaves within its deadline, so only an overloaded store gets here.
const maxPendingAcks = 1 << 16

// defaultWriteTimeout bounds a write whose context has no deadline (as
// jetstream.PublishMsg's default timeout does).
const defaultWriteTimeout = 5 * time.Second

// noResponderRetries and noResponderWait: a write that finds no stream
// (a stream leader being elected) is retried like jetstream.PublishMsg
// retries it.
const (
	noResponderRetries = 2
	noResponderWait    = 250 * time.Millisecond
)

// errNoStream is a write's outcome when no stream took it (no responders).
var errNoStream = fmt.Errorf("%w: %w: %w", ErrUnavailable, ErrNoStream, jetstream.ErrNoStreamResponse)

// keyBusyRetries and keyBusyWait: a revision-checked write that reaches a
// replicated stream's leader while an earlier write to the key is proposed
// but not yet applied is refused undecided (10164, "wrong last sequence"
// with no sequence). The earlier write may be the caller's own, acked a
// moment before the leader stops counting it in flight (nats-server v2.15
// applyStreamEntries), so such a write is sent again, after 1 ms doubling
// to 128 ms, until the leader decides it (stored, or 10071). A key still
// busy after that keeps changing: the refusal stands, a conflict.
const (
	keyBusyRetries = 8
	keyBusyWait    = time.Millisecond
)

// keyBusy reports whether err is the undecided refusal of a write to a key
// with another write in flight (code 10164).
func keyBusy(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == codeWrongLastSeqConstant
}

// whileKeyBusy calls write until it is not refused as keyBusy, at most
// keyBusyRetries more times, within ctx (its end is ErrUnavailable: the
// write was not decided).
func whileKeyBusy[T any](ctx context.Context, write func() (T, error)) (T, error) {
	waits := retry.Doubling(keyBusyWait, keyBusyWait<<keyBusyRetries)
	for attempt := 0; ; attempt++ {
		v, err := write()
		if !keyBusy(err) || attempt == keyBusyRetries {
			return v, err
		}
		if err := retry.Sleep(ctx, waits.NextBackOff()); err != nil {
			var zero T
			return zero, MapError(err)
		}
	}
}

// Writer publishes to a JetStream stream that is not a bucket (the edge's
// hooks) on the buckets' lean write path. One Writer writes to one stream:
// an ack whose sequence is not above the last one its reply id got is taken
// for a stale second answer (acker.free), so a publish acked as a duplicate
// of an older message may wait out its deadline (ErrUnavailable) instead.
// Safe for concurrent use; its subscription ends with the connection.
type Writer struct{ a *acker }

// NewWriter returns a Writer on nc for a stream of replicas replicas that
// allows atomic publish: its writes travel in batches when Batched says so.
func NewWriter(nc *nats.Conn, replicas int) *Writer {
	a := newAcker(nc)
	a.batched = Batched(replicas)
	return &Writer{a: a}
}

// Publish publishes data with hdr to subject, which a stream must take,
// and returns the stream sequence once acked. Errors are MapError's
// (ErrUnavailable: no ack before ctx ended, or no stream after two
// retries). Nothing is sent once ctx is done.
func (w *Writer) Publish(ctx context.Context, subject string, hdr nats.Header, data []byte) (uint64, error) {
	return w.a.write(ctx, subject, hdr, data)
}

// acker matches the acks of one stream's writes to their writers. A write
// travels in a unit: alone (one message, one ack), or, on a batched acker
// (batch.go), with the writes queued behind the units in flight as one
// atomic batch whose commit alone is acked.
type acker struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string // "<inbox>.": reply subjects are prefix + base-36 id
	sub     *nats.Subscription
	next    uint64
	pending map[uint64]*ackUnit
	// free: ids whose unit was acked, with their reply subjects, for the
	// next units: few, short reply subjects stay in the server's subject
	// cache. An unacked id is never reused (its ack may still come). An
	// acked unit can be answered twice (a new leader re-applies an entry
	// its predecessor acked), so each free id keeps the highest sequence
	// acked on it, and a success ack on it not above that is the stale
	// second answer, dropped. A stale refusal (no sequence) cannot be told
	// apart: it fails the unit that reused the id, which is safe.
	free  []freeID
	stale uint64 // stale success acks dropped (tests)

	// batched: concurrent writes travel as atomic batches (batch.go).
	batched bool
	flying  int        // batched: units in flight (at most maxUnitsInFlight)
	queue   []*ackWait // batched: writes waiting for a unit in flight to end
	batches uint64     // batched: batches sent (tests)
}

type freeID struct {
	id    uint64
	reply string
	seq   uint64 // the highest sequence acked on this id
}

// ackUnit is what one reply subject waits for: a write alone, or a batch
// of writes answered by its commit's ack.
type ackUnit struct {
	id      uint64
	reply   string
	prevSeq uint64     // the highest sequence acked on id before this unit
	writes  []*ackWait // in batch order
	counted bool       // counted in acker.flying
	left    int        // writes still waiting (a unit all of whose waiters left is forgotten)
}

// ackWait is one write awaiting its ack: seq and err are set before done
// is closed.
type ackWait struct {
	a       *acker
	msg     *nats.Msg // the write (kept until it is resolved: a refused batch sends it again alone)
	unit    *ackUnit  // nil while queued
	done    chan struct{}
	gone    bool // its waiter left
	settled bool
	seq     uint64
	err     error
}

func newAcker(nc *nats.Conn) *acker {
	return &acker{nc: nc, pending: make(map[uint64]*ackUnit)}
}

// start sends a write (or, on a batched acker with units in flight,
// queues it for the next batch) and registers it. An error means nothing
// was sent.
func (a *acker) start(subject string, hdr nats.Header, data []byte) (*ackWait, error) {
	w := &ackWait{a: a, done: make(chan struct{}), msg: &nats.Msg{Subject: subject, Header: hdr, Data: data}}
	a.mu.Lock()
	if a.sub == nil {
		if err := a.subscribeLocked(); err != nil {
			a.mu.Unlock()
			return nil, err
		}
	}
	if len(a.pending)+len(a.queue) >= maxPendingAcks {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: %d writes await their acks", ErrUnavailable, maxPendingAcks)
	}
	if a.batched && (a.flying >= maxUnitsInFlight || len(a.queue) > 0) {
		a.queue = append(a.queue, w)
		a.mu.Unlock()
		return w, nil
	}
	u := a.unitLocked([]*ackWait{w}, a.batched)
	a.mu.Unlock()
	if err := a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: u.reply, Header: hdr, Data: data}); err != nil {
		a.mu.Lock()
		a.dropLocked(u)
		a.mu.Unlock()
		a.flush()
		return nil, MapError(err)
	}
	return w, nil
}

// unitLocked registers a unit for writes under a reply id of its own.
func (a *acker) unitLocked(writes []*ackWait, counted bool) *ackUnit {
	u := &ackUnit{writes: writes, counted: counted, left: len(writes)}
	if n := len(a.free); n > 0 {
		u.id, u.reply, u.prevSeq = a.free[n-1].id, a.free[n-1].reply, a.free[n-1].seq
		a.free = a.free[:n-1]
	} else {
		a.next++
		u.id, u.reply = a.next, a.prefix+strconv.FormatUint(a.next, 36)
	}
	for _, w := range writes {
		w.unit = u
	}
	if counted {
		a.flying++
	}
	a.pending[u.id] = u
	return u
}

// dropLocked forgets a unit whose ack will not be awaited.
func (a *acker) dropLocked(u *ackUnit) {
	if a.pending[u.id] != u {
		return
	}
	delete(a.pending, u.id)
	if u.counted {
		a.flying--
	}
}

func (a *acker) subscribeLocked() error {
	prefix := a.nc.NewInbox() + "."
	sub, err := a.nc.Subscribe(prefix+"*", a.handle)
	if err != nil {
		return MapError(err)
	}
	// Acks come in bursts of a frame's writes; never drop one as a slow
	// consumer while the bound above holds.
	_ = sub.SetPendingLimits(-1, -1)
	a.prefix, a.sub = prefix, sub
	return nil
}

// leave is a write's waiter giving up: a queued write is taken out of the
// queue (it was never sent); a unit all of whose waiters left is
// forgotten (its ack, if it comes, is dropped), which lets the queue go on.
func (a *acker) leave(w *ackWait) {
	a.mu.Lock()
	w.gone = true
	u := w.unit
	if u == nil {
		if i := slices.Index(a.queue, w); i >= 0 {
			a.queue = slices.Delete(a.queue, i, i+1)
		}
		a.mu.Unlock()
		return
	}
	if u.left--; u.left > 0 {
		a.mu.Unlock()
		return
	}
	a.dropLocked(u)
	a.mu.Unlock()
	a.flush()
}

// handle resolves the unit an ack answers (an ack for a unit whose
// waiters all gave up is dropped, and so is a stale second answer to the
// id's previous unit: see acker.free).
func (a *acker) handle(m *nats.Msg) {
	id, ok := parseAckID(m.Subject, len(a.prefix))
	if !ok {
		return
	}
	var seq, count uint64
	var err error
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		err = errNoStream
	} else {
		seq, count, err = parseAckCount(m.Data)
	}
	a.mu.Lock()
	u := a.pending[id]
	if u != nil && err == nil && seq <= u.prevSeq {
		a.stale++
		a.mu.Unlock()
		return // this unit's own answer is still to come
	}
	if u != nil {
		a.dropLocked(u)
		a.free = append(a.free, freeID{id: id, reply: u.reply, seq: max(seq, u.prevSeq)})
	}
	a.mu.Unlock()
	if u == nil {
		return
	}
	if len(u.writes) == 1 {
		u.writes[0].resolve(seq, err)
	} else {
		a.resolveBatch(u, seq, count, err)
	}
	a.flush()
}

// resolve sets a write's outcome, once.
func (w *ackWait) resolve(seq uint64, err error) {
	w.a.mu.Lock()
	if w.settled {
		w.a.mu.Unlock()
		return
	}
	w.settled = true
	w.a.mu.Unlock()
	w.seq, w.err = seq, err
	close(w.done)
}

// wait returns the write's stream sequence or its error (mapped): ctx's
// end is ErrUnavailable (the write may still land).
func (w *ackWait) wait(ctx context.Context) (uint64, error) {
	select {
	case <-w.done:
		return w.seq, w.err
	default:
	}
	select {
	case <-w.done:
		return w.seq, w.err
	case <-ctx.Done():
		w.a.leave(w)
		select {
		case <-w.done: // resolved meanwhile
			return w.seq, w.err
		default:
		}
		return 0, MapError(ctx.Err())
	}
}

// write publishes and waits for the ack, retrying a write no stream took
// (jetstream.PublishMsg's retries) and one refused while another write to
// its key was in flight (whileKeyBusy) within ctx. Nothing is sent once
// ctx is done.
func (a *acker) write(ctx context.Context, subject string, hdr nats.Header, data []byte) (uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultWriteTimeout)
		defer cancel()
	}
	return whileKeyBusy(ctx, func() (uint64, error) { return a.writeOnce(ctx, subject, hdr, data) })
}

// writeOnce is write without the keyBusy retries.
func (a *acker) writeOnce(ctx context.Context, subject string, hdr nats.Header, data []byte) (uint64, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil { // a done context sends nothing
			return 0, MapError(err)
		}
		w, err := a.start(subject, hdr, data)
		if err != nil {
			return 0, err
		}
		seq, err := w.wait(ctx)
		if err != errNoStream || attempt == noResponderRetries {
			return seq, err
		}
		if retry.Sleep(ctx, noResponderWait) != nil {
			return 0, err
		}
	}
}

// parseAckID reads the base-36 id after the prefix of an ack's subject.
func parseAckID(subject string, prefix int) (uint64, bool) {
	if len(subject) <= prefix || len(subject)-prefix > 13 {
		return 0, false
	}
	var id uint64
	for i := prefix; i < len(subject); i++ {
		c := subject[i]
		switch {
		case c >= '0' && c <= '9':
			id = id*36 + uint64(c-'0')
		case c >= 'a' && c <= 'z':
			id = id*36 + uint64(c-'a'+10)
		default:
			return 0, false
		}
	}
	return id, true
}

var (
	ackStream = []byte(`{"stream":"`)
	ackSeq    = []byte(`"seq":`)
	ackError  = []byte(`"error"`)
)

// parseAck reads a JetStream pub ack: the stream sequence of the write,
// or the error it carries (mapped by MapError), or ErrUnavailable for an
// answer that is not an ack. The common ack is read without a JSON
// decoder; anything carrying an error is decoded in full.
func parseAck(data []byte) (uint64, error) {
	if bytes.Contains(data, ackError) {
		return parseAckSlow(data)
	}
	if !bytes.HasPrefix(data, ackStream) || len(data) <= len(ackStream) || data[len(ackStream)] == '"' {
		return parseAckSlow(data)
	}
	i := bytes.Index(data, ackSeq)
	if i < 0 {
		return parseAckSlow(data)
	}
	digits := data[i+len(ackSeq):]
	var seq uint64
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		seq = seq*10 + uint64(digits[n]-'0')
		n++
	}
	if n == 0 || n > 19 || seq == 0 { // 19 digits cannot overflow
		return parseAckSlow(data)
	}
	return seq, nil
}

// parseAckSlow decodes an ack as jetstream.PublishMsg does.
func parseAckSlow(data []byte) (uint64, error) {
	var resp struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, jetstream.ErrInvalidJSAck)
	}
	if resp.Error != nil {
		return 0, MapError(fmt.Errorf("nats: %w", resp.Error))
	}
	if resp.Stream == "" {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, jetstream.ErrInvalidJSAck)
	}
	return resp.Seq, nil
}

// Write headers. A create's (expected last subject sequence 0 and a TTL)
// is the same for every create with that TTL: it is built once and shared
// (a header is only read while a publish encodes it).
const (
	hdrExpectLastSubjSeq = "Nats-Expected-Last-Subject-Sequence"
	hdrTTL               = "Nats-TTL"
)

type createHeader struct {
	ttl time.Duration
	hdr nats.Header
}

// writeHeader is the header of a write expecting lastRev with ttl
// (0: none).
func (b *Bucket) writeHeader(lastRev uint64, ttl time.Duration) nats.Header {
	if lastRev == 0 {
		if c := b.createHdr.Load(); c != nil && c.ttl == ttl {
			return c.hdr
		}
	}
	h := nats.Header{hdrExpectLastSubjSeq: []string{strconv.FormatUint(lastRev, 10)}}
	if ttl > 0 {
		h[hdrTTL] = []string{RoundTTL(ttl).String()}
	}
	if lastRev == 0 {
		b.createHdr.Store(&createHeader{ttl: ttl, hdr: h})
	}
	return h
}
