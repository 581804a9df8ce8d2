package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/internal/promreg"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Dead letters (docs/PROTOCOL.md "Dead letters"): a hook a managed
// consumer gave up on — its max_deliver exhausted, or terminated by a
// reader — copied with why into the stream DeadLetterStream, on
// DeadLetterSubject(prefix, tenant, name).
const (
	// DeadLetterStream keeps the dead letters until an operator redrives
	// or purges them.
	DeadLetterStream = protocol.DeadLetterStream
	// AdvisoryStream captures the advisories a dead letter is made from,
	// so that none raised while a node is up is lost: the nodes consume
	// it durably (the consumer AdvisoryConsumer, shared).
	AdvisoryStream   = "SLUICE_ADVISORIES"
	AdvisoryConsumer = "deadletter"
	// MaxDeadLetterList bounds one listing.
	MaxDeadLetterList = 100
	// AdvisoryMaxAge is how long a captured advisory is kept (a node
	// copies it at once; this covers a fleet down for days).
	AdvisoryMaxAge = 7 * 24 * time.Hour
)

// Headers of a dead letter, besides the hook's own.
const (
	HeaderDeadReason     = "Sluice-Dead-Reason" // max_deliver | terminated
	HeaderDeadConsumer   = "Sluice-Dead-Consumer"
	HeaderDeadDeliveries = "Sluice-Dead-Deliveries"
	HeaderDeadStream     = "Sluice-Dead-Stream"
	HeaderDeadStreamSeq  = "Sluice-Dead-Stream-Seq"
	HeaderDeadSubject    = "Sluice-Dead-Subject" // the hook's subject in its stream
	HeaderDeadTermReason = "Sluice-Dead-Term-Reason"
	// HeaderRedriveOf names the dead letter a redriven hook came from.
	HeaderRedriveOf = "Sluice-Redrive-Of"
)

// Dead-letter reasons.
const (
	DeadMaxDeliver = "max_deliver"
	DeadTerminated = "terminated"
)

// DeadLetterSubject is where tenant's consumer name's dead letters are
// (protocol.DeadLetterSubject).
func DeadLetterSubject(prefix, tenant, name string) string {
	return protocol.DeadLetterSubject(prefix, tenant, name)
}

// ensureDeadReader creates tenant's reader of its dead letters, the
// durable pull consumer protocol.DeadLetterReader of DEADLETTER filtered
// to the tenant's letters, which the tenant's consumer role may read (and
// ack: each reader's position) and nothing else may; an existing one is
// kept as it is. Letters stay until an operator redrives or purges them.
func (s *HookStore) ensureDeadReader(ctx context.Context, tenant string) error {
	name := protocol.DeadLetterReader(tenant)
	if _, err := s.js.Consumer(ctx, DeadLetterStream, name); err == nil {
		return nil
	}
	_, err := s.js.CreateConsumer(ctx, DeadLetterStream, jetstream.ConsumerConfig{Durable: name,
		Description:   "sluice: the dead letters of tenant " + tenant + ", for its readers",
		FilterSubject: protocol.DeadLetterReaderFilter(s.prefix, tenant),
		AckPolicy:     jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: DefaultConsumerAckWait})
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("hooks: the dead-letter reader of %s: %w", tenant, kvstore.MapError(err))
	}
	return nil
}

const (
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
	advisoryTerminated    = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."
)

// EnsureDeadLetters creates (or updates) the advisory capture of the
// hooks streams and the dead-letter stream.
func EnsureDeadLetters(ctx context.Context, js jetstream.JetStream, prefix, stream string, shards, replicas int) error {
	var subjects []string
	for _, s := range HooksStreams(stream, shards) {
		subjects = append(subjects, advisoryMaxDeliveries+s+".*", advisoryTerminated+s+".*")
	}
	// Written only when missing or changed (createStream): a restart
	// rewrites no stream's meta (fx TestRestartRewritesNoStreamMeta).
	if _, err := createStream(ctx, js, jetstream.StreamConfig{Name: AdvisoryStream, Subjects: subjects,
		MaxAge: AdvisoryMaxAge, Replicas: max(replicas, 1), Description: "sluice: the hooks streams' max-deliveries and terminated advisories"}); err != nil {
		return err
	}
	if _, err := createStream(ctx, js, jetstream.StreamConfig{Name: DeadLetterStream, Subjects: []string{prefix + ".deadletter.>"},
		Replicas: max(replicas, 1), Duplicates: time.Hour, Description: "sluice: dead letters of the managed consumers"}); err != nil {
		return err
	}
	// Each attempt bounded (kvstore.Retry): on a forming cluster the new
	// stream may have no leader yet, and a consumer request to it is
	// answered by no one until one is elected.
	err := kvstore.Retry(ctx, func(ctx context.Context) error {
		if _, err := js.Consumer(ctx, AdvisoryStream, AdvisoryConsumer); err == nil {
			return nil
		}
		// Every node creates it at start: a create raced by another
		// node's is never answered (kvstore.CreateRaced).
		err := kvstore.CreateRaced(ctx, func(ctx context.Context) error {
			_, err := js.CreateConsumer(ctx, AdvisoryStream, jetstream.ConsumerConfig{Durable: AdvisoryConsumer,
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, DeliverPolicy: jetstream.DeliverAllPolicy})
			return err
		}, func(ctx context.Context) error {
			_, err := js.Consumer(ctx, AdvisoryStream, AdvisoryConsumer)
			return err
		})
		if errors.Is(err, jetstream.ErrConsumerExists) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("hooks: advisory consumer: %w", err)
	}
	return nil
}

// DeadLetters copies advisories into dead letters; Stop ends it.
type DeadLetters struct {
	js     jetstream.JetStream
	prefix string
	log    *slog.Logger
	sync   durability.Syncer      // the node's barrier (nil: the ack is the promise)
	total  *prometheus.CounterVec // reason
	cc     jetstream.ConsumeContext
}

// StartDeadLetters consumes the advisory stream (EnsureDeadLetters) until
// Stop, registering sluice_dead_letters_total{reason} on reg. An advisory
// is acked once its letter is stored and sync (the node's durability
// barrier, as a hook's 2xx waits for it; nil: JetStream's ack is the
// promise) has vouched for it.
func StartDeadLetters(ctx context.Context, js jetstream.JetStream, prefix string, sync durability.Syncer, reg prometheus.Registerer, log *slog.Logger) (*DeadLetters, error) {
	ms := promreg.NewSet(reg, "")
	d := &DeadLetters{js: js, prefix: prefix, log: log, sync: sync,
		total: ms.CounterVec("dead_letters_total", "Hooks copied into DEADLETTER, by reason (max_deliver, terminated).", "reason")}
	if err := ms.Err(); err != nil {
		return nil, err
	}
	promreg.Zero(d.total, []string{DeadMaxDeliver, DeadTerminated}) // exported at zero (alert SluiceDeadLetters)
	var c jetstream.Consumer
	err := kvstore.Retry(ctx, func(ctx context.Context) (err error) {
		c, err = js.Consumer(ctx, AdvisoryStream, AdvisoryConsumer)
		return err
	})
	if err != nil {
		return nil, err
	}
	if d.cc, err = c.Consume(d.handle); err != nil {
		return nil, err
	}
	return d, nil
}

// Stop stops consuming and waits for the advisory in hand.
func (d *DeadLetters) Stop() {
	d.cc.Drain()
	<-d.cc.Closed()
}

// handle copies one advisory's hook; an advisory it cannot copy now, or
// whose letter the barrier did not vouch for, is left unacked (delivered
// again after the ack wait).
func (d *DeadLetters) handle(m jetstream.Msg) {
	var adv struct {
		Stream     string `json:"stream"`
		Consumer   string `json:"consumer"`
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
		Reason     string `json:"reason"`
	}
	reason := DeadMaxDeliver
	if strings.HasPrefix(m.Subject(), advisoryTerminated) {
		reason = DeadTerminated
	}
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		_ = m.Term() // not an advisory sluice can read
		return
	}
	tok, name, ok := protocol.ManagedConsumerName(adv.Consumer)
	if !ok {
		_ = m.Ack() // not a managed consumer's: not sluice's to keep
		return
	}
	tenant, err := protocol.DecodeToken(tok)
	if err != nil {
		_ = m.Ack()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := nats.NewMsg(DeadLetterSubject(d.prefix, tenant, name))
	var hook *jetstream.RawStreamMsg
	st, err := d.js.Stream(ctx, adv.Stream)
	if err == nil {
		hook, err = st.GetMsg(ctx, adv.StreamSeq)
	}
	switch {
	case err == nil:
		out.Data = hook.Data
		for k, v := range hook.Header {
			out.Header[k] = v
		}
		out.Header.Set(HeaderDeadSubject, hook.Subject)
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// Gone from its stream (--hooks-max-age): the letter says where it was.
	default:
		d.log.Warn("dead letters: reading the hook failed; retried", "stream", adv.Stream, "seq", adv.StreamSeq, "error", err)
		return
	}
	// Not the hook's publish conditions (its stream, its id): the letter's.
	for k := range out.Header {
		if strings.HasPrefix(k, "Nats-Expected-") || k == nats.MsgIdHdr {
			out.Header.Del(k)
		}
	}
	out.Header.Set(HeaderDeadReason, reason)
	out.Header.Set(HeaderDeadConsumer, name)
	out.Header.Set(HeaderDeadDeliveries, strconv.FormatUint(adv.Deliveries, 10))
	out.Header.Set(HeaderDeadStream, adv.Stream)
	out.Header.Set(HeaderDeadStreamSeq, strconv.FormatUint(adv.StreamSeq, 10))
	if adv.Reason != "" {
		out.Header.Set(HeaderDeadTermReason, adv.Reason)
	}
	// Idempotent: the same hook of the same consumer is one letter
	// (the stream's duplicate window), whichever node copies it.
	pa, err := d.js.PublishMsg(ctx, out, jetstream.WithMsgID(adv.Stream+"."+strconv.FormatUint(adv.StreamSeq, 10)+"."+adv.Consumer))
	if err != nil {
		d.log.Warn("dead letters: storing failed; retried", "consumer", adv.Consumer, "seq", adv.StreamSeq, "error", err)
		return
	}
	// A duplicate too: the first copy may be in the page cache only.
	if err := durability.ForScope(durability.SyncWith(ctx, d.sync), durability.SyncScope{DeadLetters: true}); err != nil {
		d.log.Warn("dead letters: the store's sync failed; retried", "consumer", adv.Consumer, "seq", adv.StreamSeq, "error", err)
		return
	}
	if !pa.Duplicate {
		d.total.WithLabelValues(reason).Inc()
		d.log.Info("dead letter", "tenant", tenant, "consumer", name, "reason", reason, "stream_seq", adv.StreamSeq, "deliveries", adv.Deliveries)
	}
	_ = m.Ack()
}

// DeadLetter is one dead letter as the admin API shows it.
type DeadLetter struct {
	Seq        uint64    `json:"seq"`
	HookID     string    `json:"hook_id"`
	Reason     string    `json:"reason"`
	TermReason string    `json:"term_reason,omitempty"`
	Deliveries uint64    `json:"deliveries"`
	Stream     string    `json:"stream"`
	StreamSeq  uint64    `json:"stream_seq"`
	Subject    string    `json:"subject,omitempty"`
	Time       time.Time `json:"time"`
	Bytes      int       `json:"bytes"`
}

func deadLetterOf(m *jetstream.RawStreamMsg) DeadLetter {
	h := m.Header
	n, _ := strconv.ParseUint(h.Get(HeaderDeadDeliveries), 10, 64)
	seq, _ := strconv.ParseUint(h.Get(HeaderDeadStreamSeq), 10, 64)
	return DeadLetter{Seq: m.Sequence, HookID: h.Get("Sluice-Hook-Id"), Reason: h.Get(HeaderDeadReason), TermReason: h.Get(HeaderDeadTermReason),
		Deliveries: n, Stream: h.Get(HeaderDeadStream), StreamSeq: seq, Subject: h.Get(HeaderDeadSubject), Time: m.Time, Bytes: len(m.Data)}
}

// ListDead is up to MaxDeadLetterList of tenant's consumer name's dead
// letters from after the sequence after; next is the last one's sequence
// when the page is full (0: no more).
func (s *HookStore) ListDead(ctx context.Context, tenant, name string, after uint64) (letters []DeadLetter, next uint64, err error) {
	subj := DeadLetterSubject(s.prefix, tenant, name)
	st, err := s.js.Stream(ctx, DeadLetterStream)
	if err != nil {
		return nil, 0, kvstore.MapError(err)
	}
	out := []DeadLetter{}
	for seq := after + 1; len(out) < MaxDeadLetterList; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, 0, kvstore.MapError(err)
		}
		out = append(out, deadLetterOf(m))
		seq = m.Sequence + 1
		next = m.Sequence
	}
	if len(out) < MaxDeadLetterList {
		next = 0
	}
	return out, next, nil
}

// deadMsg is the dead letter seq of tenant's name only, and the
// dead-letter stream.
func (s *HookStore) deadMsg(ctx context.Context, tenant, name string, seq uint64) (*jetstream.RawStreamMsg, jetstream.Stream, error) {
	if seq == 0 {
		return nil, nil, fmt.Errorf("%w: seq must be a dead letter's sequence", ErrConsumerConfig)
	}
	st, err := s.js.Stream(ctx, DeadLetterStream)
	if err != nil {
		return nil, nil, kvstore.MapError(err)
	}
	m, err := st.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, nil, ErrDeadLetterNotFound
	case err != nil:
		return nil, nil, kvstore.MapError(err)
	case m.Subject != DeadLetterSubject(s.prefix, tenant, name):
		return nil, nil, ErrDeadLetterNotFound // another consumer's (or tenant's): not this one's
	}
	return m, st, nil
}

// ErrDeadLetterNotFound: no such dead letter of the consumer.
var ErrDeadLetterNotFound = errors.New("hooks: no such dead letter")

// PurgeDead deletes every dead letter of tenant's consumer name.
func (s *HookStore) PurgeDead(ctx context.Context, tenant, name string) error {
	st, err := s.js.Stream(ctx, DeadLetterStream)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(DeadLetterSubject(s.prefix, tenant, name)))
	}
	return kvstore.MapError(err)
}

// GetDead is the dead letter seq of tenant's consumer name, with the
// hook's headers and body.
func (s *HookStore) GetDead(ctx context.Context, tenant, name string, seq uint64) (DeadLetter, nats.Header, []byte, error) {
	m, _, err := s.deadMsg(ctx, tenant, name, seq)
	if err != nil {
		return DeadLetter{}, nil, nil, err
	}
	return deadLetterOf(m), m.Header, m.Data, nil
}

// RedriveDead stores the hook of dead letter seq of tenant's consumer
// name again on its subject (a new hook, Nats-Msg-Id "<hook id>.redrive.<seq>",
// HeaderRedriveOf the letter), waits for the node's barrier as for a hook
// of the tenant (sync nil: JetStream's ack is the promise), and only then
// deletes the letter: a power cut keeps the letter or the hook, never
// neither. A failed barrier (or an answer lost) keeps the letter; the id
// comes from the letter (putOnce), so a redrive again within the hooks
// stream's duplicate window stores nothing and answers the first
// attempt's sequence: a retried redrive delivers the hook once. It
// returns the letter, and the stream and sequence of the hook stored.
func (s *HookStore) RedriveDead(ctx context.Context, sync durability.Syncer, tenant, name string, seq uint64) (DeadLetter, string, uint64, error) {
	m, st, err := s.deadMsg(ctx, tenant, name, seq)
	if err != nil {
		return DeadLetter{}, "", 0, err
	}
	subj := m.Header.Get(HeaderDeadSubject)
	if subj == "" {
		return DeadLetter{}, "", 0, fmt.Errorf("%w: the hook was gone from its stream when it died: nothing to redrive", ErrConsumerConfig)
	}
	shard := protocol.Shard(tenant, s.shards)
	hdr := nats.Header{}
	for k, v := range m.Header {
		hdr[k] = v
	}
	for _, k := range []string{HeaderDeadReason, HeaderDeadConsumer, HeaderDeadDeliveries, HeaderDeadStream, HeaderDeadStreamSeq, HeaderDeadSubject, HeaderDeadTermReason} {
		hdr.Del(k)
	}
	letter := strconv.FormatUint(m.Sequence, 10)
	hdr.Set(HeaderRedriveOf, letter)
	id := m.Header.Get(HeaderHookID) + ".redrive." + letter
	stored, err := s.putOnce(ctx, shard, protocol.ShardPublishSubject(s.prefix, shard, s.shards, subj), id, hdr, m.Data)
	if err != nil {
		return DeadLetter{}, "", 0, kvstore.MapError(err)
	}
	if err := durability.ForScope(durability.SyncWith(ctx, sync), durability.SyncScope{Tenant: tenant}); err != nil {
		return DeadLetter{}, "", 0, fmt.Errorf("redrive of dead letter %s: the store's sync: %w", letter, err)
	}
	if err := st.DeleteMsg(ctx, m.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return DeadLetter{}, "", 0, kvstore.MapError(err)
	}
	return deadLetterOf(m), s.streamOf(tenant), stored, nil
}
