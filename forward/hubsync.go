package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/internal/retry"
	"github.com/sluice-dev/sluice/protocol"
)

// errSyncRefused is a hub's answer to a sync request that is not OK.
var errSyncRefused = errors.New("the hub did not sync")

// syncAnswer is the failure a hub's answer m (or err, the request's)
// means: nil for OK.
func syncAnswer(m *nats.Msg, err error) error {
	if err != nil {
		return err
	}
	var r protocol.SyncReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("%w: reply %q", errSyncRefused, m.Data)
	}
	if !r.OK {
		return fmt.Errorf("%w: %s", errSyncRefused, r.Error)
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
// now: its sync barrier (protocol.HubSyncSubject) answered OK. A hub that does not
// serve it (no responders: older than the barrier) is waited for
// HubSyncFallback after acked, the time by which an older single-node
// hub's record round (durability.RecordInterval, 1 s) has synced every
// stream; logged once per link-up.
func (f *Forwarder) durable(ctx context.Context, acked time.Time) error {
	if !f.linkedSince(acked) {
		return errLinkChanged
	}
	rctx, cancel := context.WithTimeout(ctx, f.cfg.PublishTimeout)
	m, err := f.cfg.Conn.RequestWithContext(rctx, protocol.HubSyncSubject(f.cfg.Prefix), nil)
	cancel()
	if errors.Is(err, nats.ErrNoResponders) {
		if f.legacySync.CompareAndSwap(false, true) {
			f.log.Warn("leaf: nothing answers the hub's sync barrier (a hub older than it, or one still starting): each batch's outbox copy is kept for the hub's record round before it is dropped; upgrade an older hub",
				"subject", protocol.HubSyncSubject(f.cfg.Prefix), "wait", f.cfg.HubSyncFallback)
		}
		if err := retry.Sleep(ctx, time.Until(acked.Add(f.cfg.HubSyncFallback))); err != nil {
			return err
		}
		return f.synced(acked, "waited")
	}
	if err := syncAnswer(m, err); err != nil {
		f.syncs.WithLabelValues("failed").Inc()
		return err
	}
	return f.synced(acked, "synced")
}

// synced counts a barrier done as result when the link stayed up since
// acked; else it counts it failed and returns errLinkChanged.
func (f *Forwarder) synced(acked time.Time, result string) error {
	if !f.linkedSince(acked) {
		f.syncs.WithLabelValues("failed").Inc()
		return errLinkChanged
	}
	f.syncs.WithLabelValues(result).Inc()
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
