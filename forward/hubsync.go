package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/internal/retry"
)

// SyncSubject is the hub's sync barrier (docs/PROTOCOL.md "Edge mode"),
// answered once everything the hub acknowledged before the request is on
// its disk. It is under the hub prefix (quota.HubPrefix), which nothing on
// an edge serves: the edge runs the same service and would answer itself.
func SyncSubject(prefix string) string { return prefix + ".hub.v1.sync" }

// SyncQueue is the queue group the hub's nodes serve SyncSubject in.
const SyncQueue = "sluice_hub_sync"

// SyncReply is the hub's answer to a sync request: OK once the writes it
// acknowledged before the request are durable at Durability (the hub's
// level in force).
type SyncReply struct {
	OK         bool   `json:"ok"`
	Durability string `json:"durability"`
}

// SyncMaxWaiting bounds the sync requests one hub node holds waiting for
// its next round; beyond it a request is answered 503 at once (the
// requester keeps its copy and asks again). A flood of requests only ever
// joins the shared rounds (one at a time, back to back); this bounds the
// memory it holds while a round is slow.
const SyncMaxWaiting = 10000

// SyncServer serves SyncSubject on a hub node.
type SyncServer struct {
	sub     *nats.Subscription
	then    func(func(error)) (forget func())
	ok      []byte
	waiting atomic.Int64
}

// ServeSync serves prefix's SyncSubject on nc. then runs the node's group
// commit (kvstore.GroupSync.Then): each request joins the next round. With
// then nil a request is answered at once: the hub's acks already mean what
// its durability says.
func ServeSync(nc *nats.Conn, prefix, durability string, then func(func(error)) (forget func())) (*SyncServer, error) {
	ok, err := json.Marshal(SyncReply{OK: true, Durability: durability})
	if err != nil {
		return nil, err
	}
	s := &SyncServer{then: then, ok: ok}
	if s.sub, err = nc.QueueSubscribe(SyncSubject(prefix), SyncQueue, s.serve); err != nil {
		return nil, fmt.Errorf("forward: serve %s: %w", SyncSubject(prefix), err)
	}
	// A flood is answered or dropped, never queued without bound.
	if err := s.sub.SetPendingLimits(2*SyncMaxWaiting, 4<<20); err != nil {
		_ = s.sub.Unsubscribe()
		return nil, err
	}
	return s, nil
}

// Stop stops serving (a request still waiting for its round is answered
// by the round, or not at all: its requester times out and asks again).
func (s *SyncServer) Stop() error { return s.sub.Unsubscribe() }

func (s *SyncServer) serve(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	if s.then == nil {
		_ = m.Respond(s.ok)
		return
	}
	if s.waiting.Add(1) > SyncMaxWaiting {
		s.waiting.Add(-1)
		respondErr(m, errors.New("too many sync requests waiting"))
		return
	}
	s.then(func(err error) { // on the barrier's goroutine: never blocks
		s.waiting.Add(-1)
		if err != nil {
			respondErr(m, err)
			return
		}
		_ = m.Respond(s.ok)
	})
}

// respondErr answers m with the micro error headers of a store that
// cannot answer (docs/PROTOCOL.md "NATS").
func respondErr(m *nats.Msg, err error) {
	r := nats.NewMsg(m.Reply)
	r.Header.Set("Nats-Service-Error-Code", "503")
	r.Header.Set("Nats-Service-Error", "store_unavailable: "+err.Error())
	_ = m.RespondMsg(r)
}

// errSyncRefused is a hub's answer to a sync request that is not OK.
var errSyncRefused = errors.New("the hub did not sync")

// syncAnswer is the failure a hub's answer m (or err, the request's)
// means: nil for OK.
func syncAnswer(m *nats.Msg, err error) error {
	if err != nil {
		return err
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%w: %s %s", errSyncRefused, code, m.Header.Get("Nats-Service-Error"))
	}
	var r SyncReply
	if err := json.Unmarshal(m.Data, &r); err != nil || !r.OK {
		return fmt.Errorf("%w: reply %q", errSyncRefused, m.Data)
	}
	return nil
}

// unsynced is send's failure after the hub acknowledged the first n
// messages (and their claims were registered) but did not confirm them
// durable: they stay in the outbox, and only the barrier is asked again
// (durable), not the publish.
type unsynced struct {
	n     int
	acked time.Time // by when the hub acknowledged them
	err   error
}

func (e *unsynced) Error() string { return "hub sync: " + e.err.Error() }
func (e *unsynced) Unwrap() error { return e.err }

// durable waits until the hub holds on disk what it acknowledged before
// now: its sync barrier (SyncSubject) answered OK. A hub that does not
// serve it (no responders: older than the barrier) is waited for
// HubSyncFallback after acked, the time by which an older single-node
// hub's record round (natsembed.RecordInterval, 1 s) has synced every
// stream; logged once per link-up.
func (f *Forwarder) durable(ctx context.Context, acked time.Time) error {
	if !f.linkedSince(acked) {
		return errLinkChanged
	}
	rctx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
	m, err := f.cfg.Conn.RequestWithContext(rctx, SyncSubject(f.cfg.Prefix), nil)
	cancel()
	if errors.Is(err, nats.ErrNoResponders) {
		if f.legacySync.CompareAndSwap(false, true) {
			f.log.Warn("edge: nothing answers the hub's sync barrier (a hub older than it, or one still starting): each batch's outbox copy is kept for the hub's record round before it is dropped; upgrade an older hub",
				"subject", SyncSubject(f.cfg.Prefix), "wait", f.cfg.HubSyncFallback)
		}
		if err := retry.Sleep(ctx, time.Until(acked.Add(f.cfg.HubSyncFallback))); err != nil {
			return err
		}
		if !f.linkedSince(acked) {
			f.syncs.WithLabelValues("failed").Inc()
			return errLinkChanged
		}
		f.syncs.WithLabelValues("waited").Inc()
		return nil
	}
	if err := syncAnswer(m, err); err != nil {
		f.syncs.WithLabelValues("failed").Inc()
		return err
	}
	if !f.linkedSince(acked) {
		f.syncs.WithLabelValues("failed").Inc()
		return errLinkChanged
	}
	f.syncs.WithLabelValues("synced").Inc()
	return nil
}

// errLinkChanged: the link to the hub went down after the hub's ack of a
// batch, so the hub that answers now may be another run of it (restarted:
// it may have lost the batch, and its barrier vouches only for what it
// acknowledged itself). The batch is sent again.
var errLinkChanged = errors.New("the hub link went down after the hub's ack: sending the batch again")

// linkedSince reports whether the link to the hub has been up without a
// break since before t (watchLink; a hub restart takes the link down for
// far longer than its polling period).
func (f *Forwarder) linkedSince(t time.Time) bool {
	up := f.linkUp.Load()
	return up != 0 && up <= t.UnixNano() && f.cfg.Linked()
}

// linkPoll is how often watchLink reads the link state.
const linkPoll = 20 * time.Millisecond

// watchLink keeps linkUp: when the link last came up, 0 while it is down.
func (f *Forwarder) watchLink() {
	t := time.NewTicker(linkPoll)
	defer t.Stop()
	for {
		if f.cfg.Linked() {
			f.linkUp.CompareAndSwap(0, time.Now().UnixNano())
		} else {
			f.linkUp.Store(0)
		}
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
	}
}
