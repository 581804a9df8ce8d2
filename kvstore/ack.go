package kvstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
var errNoStream = fmt.Errorf("%w: %w: %w", errUnavailable, ErrNoStream, jetstream.ErrNoStreamResponse)

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
// keyBusyRetries more times, within ctx (its end is protocol.ErrUnavailable: the
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
// of an older message may wait out its deadline (protocol.ErrUnavailable) instead.
// Safe for concurrent use; its subscription ends with the connection.
type Writer struct{ a *acker }

// NewWriter returns a Writer on nc.
func NewWriter(nc *nats.Conn) *Writer { return &Writer{a: newAcker(nc)} }

// Publish publishes data with hdr to subject, which a stream must take,
// and returns the stream sequence once acked. Errors are MapError's
// (protocol.ErrUnavailable: no ack before ctx ended, or no stream after two
// retries). Nothing is sent once ctx is done.
func (w *Writer) Publish(ctx context.Context, subject string, hdr nats.Header, data []byte) (uint64, error) {
	return w.a.write(ctx, subject, hdr, data)
}

// acker matches the acks of one bucket's writes to their writers.
type acker struct {
	nc *nats.Conn

	mu      sync.Mutex
	prefix  string // "<inbox>.": reply subjects are prefix + base-36 id
	sub     *nats.Subscription
	next    uint64
	pending map[uint64]*ackWait
	// free: ids whose write was acked, with their reply subjects, for the
	// next writes: few, short reply subjects stay in the server's subject
	// cache. An unacked id is never reused (its ack may still come). An
	// acked write can be answered twice (a new leader re-applies an entry
	// its predecessor acked), so each free id keeps the highest sequence
	// acked on it, and a success ack on it not above that is the stale
	// second answer, dropped. A stale refusal (no sequence) cannot be told
	// apart: it fails the write that reused the id, which is safe.
	free  []freeID
	stale uint64 // stale success acks dropped (tests)
}

type freeID struct {
	id    uint64
	reply string
	seq   uint64 // the highest sequence acked on this id
}

// ackWait is one write awaiting its ack: seq and err are set before done
// is closed.
type ackWait struct {
	a       *acker
	id      uint64
	reply   string
	prevSeq uint64 // the highest sequence acked on id before this write
	done    chan struct{}
	seq     uint64
	err     error
}

func newAcker(nc *nats.Conn) *acker {
	return &acker{nc: nc, pending: make(map[uint64]*ackWait)}
}

// start publishes a write with a reply subject of its own and registers
// it. An error means nothing was sent.
func (a *acker) start(subject string, hdr nats.Header, data []byte) (*ackWait, error) {
	w := &ackWait{a: a, done: make(chan struct{})}
	a.mu.Lock()
	if a.sub == nil {
		if err := a.subscribeLocked(); err != nil {
			a.mu.Unlock()
			return nil, err
		}
	}
	if len(a.pending) >= maxPendingAcks {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: %d writes await their acks", errUnavailable, maxPendingAcks)
	}
	if n := len(a.free); n > 0 {
		w.id, w.reply, w.prevSeq = a.free[n-1].id, a.free[n-1].reply, a.free[n-1].seq
		a.free = a.free[:n-1]
	} else {
		a.next++
		w.id, w.reply = a.next, a.prefix+strconv.FormatUint(a.next, 36)
	}
	a.pending[w.id] = w
	a.mu.Unlock()

	if err := a.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: w.reply, Header: hdr, Data: data}); err != nil {
		a.forget(w.id)
		return nil, MapError(err)
	}
	return w, nil
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

func (a *acker) forget(id uint64) {
	a.mu.Lock()
	delete(a.pending, id)
	a.mu.Unlock()
}

// handle resolves the write an ack answers (an ack for a write whose
// waiter gave up is dropped, and so is a stale second answer to the id's
// previous write: see acker.free).
func (a *acker) handle(m *nats.Msg) {
	id, ok := parseAckID(m.Subject, len(a.prefix))
	if !ok {
		return
	}
	var seq uint64
	var err error
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		err = errNoStream
	} else {
		seq, err = parseAck(m.Data)
	}
	a.mu.Lock()
	w := a.pending[id]
	if w != nil && err == nil && seq <= w.prevSeq {
		a.stale++
		a.mu.Unlock()
		return // this write's own answer is still to come
	}
	if w != nil {
		delete(a.pending, id)
		a.free = append(a.free, freeID{id: id, reply: w.reply, seq: max(seq, w.prevSeq)})
	}
	a.mu.Unlock()
	if w == nil {
		return
	}
	w.seq, w.err = seq, err
	close(w.done)
}

// wait returns the write's stream sequence or its error (mapped): ctx's
// end is protocol.ErrUnavailable (the write may still land).
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
		w.a.forget(w.id)
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
// or the error it carries (mapped by MapError), or protocol.ErrUnavailable for an
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
		return 0, fmt.Errorf("%w: %w", errUnavailable, jetstream.ErrInvalidJSAck)
	}
	if resp.Error != nil {
		return 0, MapError(fmt.Errorf("nats: %w", resp.Error))
	}
	if resp.Stream == "" {
		return 0, fmt.Errorf("%w: %w", errUnavailable, jetstream.ErrInvalidJSAck)
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
