package hooks

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// Receipt is where a stored hook is: its stream sequence, subject and
// received-at.
type Receipt struct {
	HookID     string    `json:"hook_id"`
	Seq        uint64    `json:"stream_seq"`
	Subject    string    `json:"subject"`
	ReceivedAt time.Time `json:"received_at"`
}

// ErrReceiptNotFound is returned by Find when no stored hook
// matches.
var ErrReceiptNotFound = errors.New("hooks: hook not found")

// MaxReceiptScan bounds the messages one Find reads (headers only).
const MaxReceiptScan = 1 << 20

// Find finds a stored hook of tenant's source by hook id (the message's
// Nats-Msg-Id), reading headers only, from since on (zero: the whole
// stream): an ordered, headers-only consumer on the source's subjects
// (typed or not) from since, until the hook or the end.
func (s *HookStore) Find(ctx context.Context, tenant, source, hookID string, since time.Time) (Receipt, error) {
	subj := protocol.HookSubject(s.prefix, tenant, source)
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{subj, subj + ".*"},
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		HeadersOnly:       true,
		InactiveThreshold: 5 * time.Second,
	}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := s.js.OrderedConsumer(ctx, s.streamOf(tenant), cfg)
	if err != nil {
		return Receipt{}, kvstore.MapError(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return Receipt{}, kvstore.MapError(err)
	}
	left := info.NumPending
	for read := 0; left > 0 && read < MaxReceiptScan; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return Receipt{}, kvstore.MapError(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			left = md.NumPending
			if m.Headers().Get(HeaderHookID) != hookID {
				continue
			}
			at, _ := time.Parse(time.RFC3339Nano, m.Headers().Get(HeaderReceivedAt))
			return Receipt{HookID: hookID, Seq: md.Sequence.Stream, Subject: m.Subject(), ReceivedAt: at}, nil
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return Receipt{}, kvstore.MapError(err)
		}
		if n == 0 {
			break
		}
		read += n
	}
	return Receipt{}, ErrReceiptNotFound
}
