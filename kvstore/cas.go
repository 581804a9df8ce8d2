package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/protocol"
)

// Sentinel errors. Every error returned by this package's I/O helpers wraps
// at most one of them (plus the underlying cause).
var (
	// ErrExists: Create found a live value under the key.
	ErrExists = errors.New("kvstore: key exists")
	// ErrWrongLastSequence: a revision-checked write found another revision.
	// Mapped from JetStream code 10071, and from 10164 (a replicated
	// stream's refusal while another write to the key is in flight) when
	// the writes' retries of it (keyBusyRetries) did not get a decision.
	ErrWrongLastSequence = errors.New("kvstore: wrong last sequence")
	// ErrNotFound: no live value under the key (absent, deleted, purged or
	// expired).
	ErrNotFound = errors.New("kvstore: key not found")
	// ErrFull: the bucket is at its MaxMsgs limit (code 10077).
	ErrFull = errors.New("kvstore: bucket full")
	// protocol.ErrUnavailable: the store did not answer within the caller's deadline,
	// had no responders, or the connection is closed. A value, never a panic.
	errUnavailable = fmt.Errorf("kvstore: store %w", protocol.ErrUnavailable)
	// ErrNoStream comes with protocol.ErrUnavailable when no stream took a write
	// (no responders: a stream leader being elected). The synchronous
	// writes retry it; AsyncCreate.Wait returns it.
	ErrNoStream = errors.New("kvstore: no stream took the write")
)

// JetStream API error codes that matter to sluice.
const (
	codeWrongLastSeq         = 10071
	codeWrongLastSeqConstant = 10164
	codeMaxMsgs              = 10077
)

// MapError classifies a JetStream/NATS error by wrapping the matching
// sentinel around it. nil stays nil; an unknown error is returned as is.
func MapError(err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrExists, ErrWrongLastSequence, ErrNotFound, ErrFull, errUnavailable} {
		if errors.Is(err, s) {
			return err
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeWrongLastSeq, codeWrongLastSeqConstant:
			return fmt.Errorf("%w: %w", ErrWrongLastSequence, err)
		case codeMaxMsgs:
			return fmt.Errorf("%w: %w", ErrFull, err)
		}
	}
	if isWrongLastSeqText(err) {
		return fmt.Errorf("%w: %w", ErrWrongLastSequence, err)
	}
	if strings.Contains(err.Error(), "maximum messages exceeded") {
		return fmt.Errorf("%w: %w", ErrFull, err)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, jetstream.ErrJetStreamPublisherClosed):
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	var apiErr2 *jetstream.APIError
	if errors.As(err, &apiErr2) && apiErr2.Code == 503 {
		return fmt.Errorf("%w: %w", errUnavailable, err)
	}
	return err
}

// isWrongLastSeqText catches a raw "wrong last sequence" that reached us
// without an APIError (kv.Create over a marker can surface one unwrapped).
func isWrongLastSeqText(err error) bool {
	return strings.Contains(err.Error(), "wrong last sequence")
}

// RoundTTL rounds a TTL up to whole seconds with a minimum of one second:
// JetStream TTLs are whole seconds and rounding down would expire early.
func RoundTTL(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

// WithBudget returns ctx bounded by budget when ctx has no deadline of its
// own, and ctx unchanged (with a no-op-safe cancel) when it has one.
func WithBudget(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || budget <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, budget)
}

// Record is one live value read from a bucket.
type Record struct {
	Key      string
	Revision uint64
	Value    []byte
	Created  time.Time     // server time of the write
	TTL      time.Duration // per-message TTL, 0 when none
}

// ExpiresAt is when the record's TTL runs out (zero time without a TTL).
func (r *Record) ExpiresAt() time.Time {
	if r.TTL <= 0 {
		return time.Time{}
	}
	return r.Created.Add(r.TTL)
}

// Bucket is a KV bucket with the revision-checked, TTL-carrying operations
// sluice needs and nats.go's KeyValue does not offer (Update drops TTLs,
// nats.go#1994). It is safe for concurrent use.
type Bucket struct {
	js        jetstream.JetStream
	kv        jetstream.KeyValue
	stream    jetstream.Stream
	name      string
	prefix    string // the keys' subjects in the stream ("$KV.<bucket>.")
	put       string // where writes are published: prefix, or through another domain's API (OpenRemoteBucket)
	api       string // the JetStream API prefix ("$JS.API." or "$JS.<domain>.API.")
	marker    time.Duration
	acks      *acker                       // the lean write path (ack.go)
	createHdr atomic.Pointer[createHeader] // the last create header built
}

// OpenBucket ensures the bucket exists with cfg (EnsureBucket) and returns it.
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (*Bucket, error) {
	kv, err := EnsureBucket(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, StreamName(cfg.Name))
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s stream: %w", cfg.Name, MapError(err))
	}
	marker := cfg.LimitMarkerTTL
	if marker == 0 {
		marker = time.Second
	}
	return &Bucket{js: js, kv: kv, stream: st, name: cfg.Name, prefix: SubjectPrefix(cfg.Name), put: SubjectPrefix(cfg.Name), api: "$JS.API.", marker: RoundTTL(marker), acks: newAcker(js.Conn())}, nil
}

// OpenRemoteBucket opens the existing bucket name of another JetStream
// domain (a leaf's view of its hub's bucket), js made for that domain.
// Reads go through its API; writes are published to
// "$JS.<domain>.API.$KV.<name>.<key>", which the domain maps to the bucket
// ($KV.> itself is denied between domains). The bucket is not changed.
func OpenRemoteBucket(ctx context.Context, js jetstream.JetStream, domain, name string) (*Bucket, error) {
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s in domain %s: %w", name, domain, MapError(err))
	}
	st, err := js.Stream(ctx, StreamName(name))
	if err != nil {
		return nil, fmt.Errorf("kvstore: bucket %s stream in domain %s: %w", name, domain, MapError(err))
	}
	return &Bucket{js: js, kv: kv, stream: st, name: name, prefix: SubjectPrefix(name),
		put: "$JS." + domain + ".API." + SubjectPrefix(name), api: "$JS." + domain + ".API.", marker: time.Second, acks: newAcker(js.Conn())}, nil
}

// Name of the bucket.
func (b *Bucket) Name() string { return b.name }

// KV is the plain nats.go handle (watchers, listing).
func (b *Bucket) KV() jetstream.KeyValue { return b.kv }

// Subject is the subject a key is stored under.
func (b *Bucket) Subject(key string) string { return b.prefix + key }

// Create stores value under key if the key has no live value, with a per-key
// TTL (rounded up to whole seconds; 0 = no TTL). A delete/purge/expiry marker
// does not count as a value. It returns the new revision, or ErrExists with
// the live record when there is one (the record may be nil when it vanished
// between the failed write and the read, after bounded retries).
func (b *Bucket) Create(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, *Record, error) {
	var expect uint64
	for attempt := 0; attempt < 4; attempt++ {
		rev, err := b.Update(ctx, key, value, expect, ttl)
		if err == nil {
			return rev, nil, nil
		}
		if !errors.Is(err, ErrWrongLastSequence) {
			return 0, nil, err
		}
		// A direct get may come from a lagging replica; from the second
		// conflict on, ask the leader.
		get := b.getLast
		if attempt > 0 {
			get = b.getLastLeader
		}
		rec, last, gerr := get(ctx, key)
		switch {
		case gerr == nil && rec != nil:
			return 0, rec, fmt.Errorf("%w: %s", ErrExists, key)
		case gerr == nil:
			expect = last // a marker: create over it
		case errors.Is(gerr, ErrNotFound):
			expect = 0 // the marker itself expired meanwhile
		default:
			return 0, nil, gerr
		}
	}
	return 0, nil, fmt.Errorf("%w: %s (contended)", ErrExists, key)
}

// Update writes value under key only if the key's last revision (markers
// included) is lastRev (0: no message at all), keeping the per-key TTL
// (unlike jetstream.KeyValue.Update). A conflict is ErrWrongLastSequence; a
// write refused because another write to key is in flight at the leader is
// sent again (keyBusyRetries), never taken for a conflict at once.
func (b *Bucket) Update(ctx context.Context, key string, value []byte, lastRev uint64, ttl time.Duration) (uint64, error) {
	return b.acks.write(ctx, b.put+key, b.writeHeader(lastRev, ttl), value)
}

// Put writes value under key unconditionally, with an optional TTL.
func (b *Bucket) Put(ctx context.Context, key string, value []byte, ttl time.Duration) (uint64, error) {
	var hdr nats.Header
	if ttl > 0 {
		hdr = nats.Header{hdrTTL: []string{RoundTTL(ttl).String()}}
	}
	return b.acks.write(ctx, b.put+key, hdr, value)
}

// Get reads the live value of key: ErrNotFound when there is none.
func (b *Bucket) Get(ctx context.Context, key string) (*Record, error) {
	return live(ctx, key, b.getLast)
}

// live reads key's last message with read (getLast or getLastLeader) and
// keeps a live value: a marker is ErrNotFound, as nothing is.
func live(ctx context.Context, key string, read func(context.Context, string) (*Record, uint64, error)) (*Record, error) {
	rec, _, err := read(ctx, key)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return rec, nil
}

// Purge removes key, leaving a purge marker that cleans itself up after the
// bucket's marker TTL. With lastRev > 0 it only purges that revision
// (else ErrWrongLastSequence). A purge refused while another write to the
// key was in flight is sent again, as Update's writes are.
func (b *Bucket) Purge(ctx context.Context, key string, lastRev uint64) error {
	opts := []jetstream.KVDeleteOpt{jetstream.PurgeTTL(b.marker)}
	if lastRev > 0 {
		opts = append(opts, jetstream.LastRevision(lastRev))
	}
	_, err := whileKeyBusy(ctx, func() (struct{}, error) {
		return struct{}{}, MapError(b.kv.Purge(ctx, key, opts...))
	})
	return err
}

// getLast reads the last message of key. A live value gives (rec, seq, nil);
// a marker gives (nil, seq, nil); nothing gives ErrNotFound.
func (b *Bucket) getLast(ctx context.Context, key string) (*Record, uint64, error) {
	m, err := b.stream.GetLastMsgForSubject(ctx, b.prefix+key)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// No replica serves direct gets yet (a replicated stream just
			// created, or replicas still catching up after a restart): the
			// leader answers the same read through the API.
			return b.getLastLeader(ctx, key)
		}
		return nil, 0, MapError(err)
	}
	if isMarker(m.Header) {
		return nil, m.Sequence, nil
	}
	rec := &Record{Key: key, Revision: m.Sequence, Value: m.Data, Created: m.Time}
	if m.Header != nil {
		rec.TTL = parseTTL(m.Header.Get(jetstream.MsgTTLHeader))
	}
	return rec, m.Sequence, nil
}

func isMarker(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// parseTTL reads a Nats-TTL header: a Go duration ("5s") or whole seconds.
func parseTTL(v string) time.Duration {
	if v == "" || v == "never" {
		return 0
	}
	if d, err := time.ParseDuration(v); err == nil {
		return d
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Duration(n) * time.Second
	}
	return 0
}

// GetLeader reads the live value of key from the stream leader through the
// JetStream API: a direct get may be answered by a replica behind the
// latest write, so a caller whose direct read contradicts what it knows
// confirms with GetLeader. ErrNotFound when there is no live value.
func (b *Bucket) GetLeader(ctx context.Context, key string) (*Record, error) {
	return live(ctx, key, b.getLastLeader)
}

// getLastLeader is getLast answered by the stream leader.
func (b *Bucket) getLastLeader(ctx context.Context, key string) (*Record, uint64, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{b.prefix + key})
	if err != nil {
		return nil, 0, err
	}
	msg, err := b.js.Conn().RequestWithContext(ctx, b.api+"STREAM.MSG.GET."+StreamName(b.name), req)
	if err != nil {
		return nil, 0, MapError(err)
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, fmt.Errorf("%w: leader get %s: %w", errUnavailable, key, err)
	}
	if resp.Error != nil {
		if resp.Error.Code == 404 {
			return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, 0, MapError(fmt.Errorf("leader get %s: %s (code %d/%d)", key, resp.Error.Description, resp.Error.Code, resp.Error.ErrCode))
	}
	if resp.Message == nil {
		return nil, 0, fmt.Errorf("%w: leader get %s: empty reply", errUnavailable, key)
	}
	var hdr nats.Header
	if len(resp.Message.Header) > 0 {
		if hdr, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, 0, fmt.Errorf("%w: leader get %s: headers: %w", errUnavailable, key, err)
		}
	}
	if isMarker(hdr) {
		return nil, resp.Message.Sequence, nil
	}
	rec := &Record{Key: key, Revision: resp.Message.Sequence, Value: resp.Message.Data, Created: resp.Message.Time}
	if hdr != nil {
		rec.TTL = parseTTL(hdr.Get(jetstream.MsgTTLHeader))
	}
	return rec, rec.Revision, nil
}

// CreateStart is Create's first write started without waiting, so many
// creates go out at once; collect each with AsyncCreate.Wait (call it: the
// write leaves the pending acks only then). A refused create is
// ErrWrongLastSequence from Wait, and the caller takes Create's path. An
// error here means nothing was sent.
func (b *Bucket) CreateStart(key string, value []byte, ttl time.Duration) (AsyncCreate, error) {
	w, err := b.acks.start(b.put+key, b.writeHeader(0, ttl), value)
	if err != nil {
		return AsyncCreate{}, err
	}
	return AsyncCreate{w: w}, nil
}

// UpdateStart is Update's write (lastRev >= 1) started without waiting, as
// CreateStart. A refusal (another revision, or a busy key that Update would
// resend) is ErrWrongLastSequence from Wait: the caller takes Update's
// path. An error here means nothing was sent.
func (b *Bucket) UpdateStart(key string, value []byte, lastRev uint64, ttl time.Duration) (AsyncCreate, error) {
	if lastRev == 0 {
		return AsyncCreate{}, errors.New("kvstore: UpdateStart needs a revision >= 1")
	}
	w, err := b.acks.start(b.put+key, b.writeHeader(lastRev, ttl), value)
	if err != nil {
		return AsyncCreate{}, err
	}
	return AsyncCreate{w: w}, nil
}

// AsyncCreate is a create (CreateStart) or an update (UpdateStart) in
// flight.
type AsyncCreate struct{ w *ackWait }

// Wait returns the create's revision once acked, ErrWrongLastSequence when
// the server refused it, or protocol.ErrUnavailable when no ack came by ctx's end
// (the write may still land, as a timed-out synchronous one may) or no
// stream took the write (ErrNoStream too: a leader election; Create
// retries such a write).
func (c AsyncCreate) Wait(ctx context.Context) (uint64, error) {
	return c.w.wait(ctx)
}
