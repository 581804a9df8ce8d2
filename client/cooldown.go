package client

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// Record sends <prefix>.v1.cooldown.record: the reading r of one backend of
// an account is stored (with the service's TTL, 15 min by default) and,
// atomically, a penalty whose instant r.ObservedAtMs has reached is
// dropped. A nil r.Snapshots is a reading with no figures.
func (c *Client) Record(ctx context.Context, r protocol.Reading) error {
	return c.callOK(ctx, c.subj[protocol.CooldownRecord], c.timeout, r)
}

// Penalize sends <prefix>.v1.cooldown.penalize: the backend refuses the
// account until untilMs (Unix ms; the penalty expires then); nil clears it.
func (c *Client) Penalize(ctx context.Context, account, backend string, untilMs *int64) error {
	return c.callOK(ctx, c.subj[protocol.CooldownPenalize], c.timeout,
		protocol.PenalizeRequest{Account: account, Backend: backend, UntilMs: untilMs})
}

// Load sends <prefix>.v1.cooldown.load: the fleet's view of each of the
// account's backends, one entry per requested backend, in order (a backend
// never recorded or penalized has nil times and no snapshots). Entry.Fallback
// is never set: the wire does not say when the service answered from
// node-local state. ErrBadReply also when the reply's entries do not match.
func (c *Client) Load(ctx context.Context, account string, backends []string) ([]protocol.Entry, error) {
	var rep protocol.LoadReply
	if err := c.call(ctx, c.subj[protocol.CooldownLoad], c.timeout, protocol.LoadRequest{Account: account, Backends: backends}, &rep); err != nil {
		return nil, err
	}
	if len(rep.Backends) != len(backends) {
		return nil, fmt.Errorf("%w: %s: %d entries for %d backends", ErrBadReply, c.subj[protocol.CooldownLoad], len(rep.Backends), len(backends))
	}
	for i := range rep.Backends {
		rep.Backends[i].Fallback = false
	}
	return rep.Backends, nil
}
