package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/claims"
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

// ErrReceiptNotFound is returned by HookFinder.Find when no stored hook
// matches.
var ErrReceiptNotFound = errors.New("httpapi: hook not found")

// HookFinder finds a stored hook of a tenant's source by hook id (the
// message's Nats-Msg-Id), reading headers only, from since on (zero: the
// whole stream). HookStore implements it.
type HookFinder interface {
	Find(ctx context.Context, tenant, source, hookID string, since time.Time) (Receipt, error)
}

// MaxReceiptScan bounds the messages one Find reads (headers only).
const MaxReceiptScan = 1 << 20

// Find implements HookFinder: an ordered, headers-only consumer on the
// source's subjects (typed or not) from since, until the hook or the end.
func (s *HookStore) Find(ctx context.Context, tenant, source, hookID string, since time.Time) (Receipt, error) {
	subj := HooksSubject(s.prefix, tenant, source)
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

// receiptSlack widens a receipt's scan window for clock skew and the time
// between receipt and settle.
const receiptSlack = time.Minute

// getReceipt is GET /v1/admin/hooks/{tenant}/{source}/{key...} (did the
// provider's event with this dedupe key arrive: the claim and the stored
// message; also ?key=K for a key with '/') and GET
// /v1/admin/hooks/{tenant}/{source}?hook_id=ID.
func (h *Handler) getReceipt(w http.ResponseWriter, r *http.Request) {
	tenant, source, key := r.PathValue("tenant"), r.PathValue("source"), r.PathValue("key")
	hookID := r.URL.Query().Get("hook_id")
	qkey := r.URL.Query().Get("key") // a key with '/', which a path cannot carry (%2F is refused)
	switch {
	case qkey != "" && key != "":
		protocol.InvalidRequest.Write(w, map[string]any{"reason": "give the key once"})
		return
	case qkey != "":
		key = qkey
	}
	switch {
	case !ValidName(tenant):
		protocol.InvalidTenant.Write(w, nil)
		return
	case !ValidName(source):
		protocol.InvalidSource.Write(w, nil)
		return
	case (key == "") == (hookID == "") || len(hookID) > 128:
		protocol.InvalidRequest.Write(w, map[string]any{"reason": "give a dedupe key in the path or ?hook_id="})
		return
	}
	finder, ok := h.cfg.Hooks.(HookFinder)
	if !ok {
		protocol.NotFound.Write(w, nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	out := map[string]any{"tenant": tenant, "source": source}
	var since time.Time
	if key != "" {
		out["key"] = key
		st, err := h.cfg.Claims.Get(ctx, claims.ID{Tenant: tenant, Source: source, Key: claims.NormalizeKey(key)})
		switch {
		case errors.Is(err, protocol.ErrInvalid):
			protocol.InvalidRequest.Write(w, map[string]any{"reason": err.Error()})
			return
		case err != nil:
			protocol.StoreUnavailable.Write(w, nil)
			return
		case st.State == protocol.StateAbsent:
			protocol.NotFound.Write(w, nil)
			return
		}
		hookID = st.HookID
		out["state"], out["hook_id"] = st.State, st.HookID
		// The claim was taken at most its TTL minus what is left of it ago.
		ttl := h.cfg.DedupeTTL
		if st.State == protocol.StatePending {
			ttl = h.cfg.PendingTTL
		}
		since = h.cfg.Now().Add(-(ttl - st.ExpiresIn) - receiptSlack)
	}
	rec, err := finder.Find(ctx, tenant, source, hookID, since)
	switch {
	case errors.Is(err, ErrReceiptNotFound) && key != "":
		out["stored"] = false // pending, or aged out of the stream
		writeJSON(w, http.StatusOK, out)
	case errors.Is(err, ErrReceiptNotFound):
		protocol.NotFound.Write(w, nil)
	case err != nil:
		h.log.Warn("admin: receipt lookup failed", "tenant", tenant, "error", err)
		protocol.StoreUnavailable.Write(w, nil)
	default:
		out["stored"], out["hook_id"], out["stream_seq"], out["subject"], out["received_at"] = true, rec.HookID, rec.Seq, rec.Subject, rec.ReceivedAt
		writeJSON(w, http.StatusOK, out)
	}
}
