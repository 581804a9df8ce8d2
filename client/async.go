package client

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// maxEventBytes is the largest settle/release event the events stream
// takes (events.Settler.StreamConfig's MaxMsgSize): a larger one would be
// dropped by the server without a word, so it is refused here.
const maxEventBytes = 64 << 10

// SettleAsync publishes a protocol.SettleEvent to <prefix>.v1.events.settle
// (core NATS, no reply): the fleet's settler applies it exactly as Settle
// would, some time later. A nil error only means the connection took it;
// the events stream keeps it until a settler applies it (once a settler has
// started once and created the stream), and a stale revision is dropped
// silently. Flush the connection to know the server has it; call Settle
// when the outcome matters. ErrInvalid (not published): the event fails
// its checks or is larger than the stream takes; protocol.ErrUnavailable: the
// connection is closed, draining, or its reconnect buffer is full.
func (c *Client) SettleAsync(tenant, source, key, hookID string, revision uint64) error {
	return c.publish(c.events.Settle(), protocol.SettleEvent{Tenant: tenant, Source: source, Key: key, HookID: hookID, Revision: revision})
}

// ReleaseClaimAsync publishes an protocol.SettleEvent to
// <prefix>.v1.events.release (core NATS, no reply): the fleet's settler
// releases the claim exactly as ReleaseClaim would, some time later. What a
// nil error means, and the errors, are as for SettleAsync.
func (c *Client) ReleaseClaimAsync(tenant, source, key, hookID string, revision uint64) error {
	return c.publish(c.events.Release(), protocol.SettleEvent{Tenant: tenant, Source: source, Key: key, HookID: hookID, Revision: revision})
}

// publish validates ev, as the settler will, and publishes it to subject.
func (c *Client) publish(subject string, ev protocol.SettleEvent) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, subject, err)
	}
	if err := protocol.ValidateHookID(ev.HookID); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, subject, err)
	}
	data, err := json.Marshal(ev)
	if err != nil { // cannot happen: strings and a number
		return fmt.Errorf("%w: %s: encode event: %w", ErrInvalid, subject, err)
	}
	if len(data) > maxEventBytes {
		return fmt.Errorf("%w: %s: event of %d bytes, the stream takes at most %d", ErrInvalid, subject, len(data), maxEventBytes)
	}
	if err := c.nc.Publish(subject, data); err != nil {
		return requestError(subject, err)
	}
	return nil
}
