package client

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// ClaimReplay sends <prefix>.v1.replay.claim: the replay nonce (namespace,
// key) is recorded until retainUntil (Unix seconds; a caller allowing for
// clock skew adds it). The outcome is a value: protocol.Claimed (new, now held),
// protocol.AlreadyClaimed (seen before: a replay; retention is not
// refreshed) or protocol.Full (new, but the store is at its capacity).
//
// Errors: ErrInvalid (namespace or key not 1..256 bytes, retainUntil
// outside 0..253402300799), ErrUnavailable, ErrInternal, ErrBadReply (also
// for a result this client does not know).
func (c *Client) ClaimReplay(ctx context.Context, namespace, key string, retainUntil int64) (protocol.ReplayOutcome, error) {
	var rep protocol.ReplayReply
	req := protocol.ReplayRequest{Namespace: namespace, Key: key, RetainUntil: retainUntil}
	if err := c.call(ctx, c.subj[protocol.ReplayClaim], c.timeout, req, &rep); err != nil {
		return 0, err
	}
	for _, o := range []protocol.ReplayOutcome{protocol.Claimed, protocol.AlreadyClaimed, protocol.Full} {
		if rep.Result == o.String() {
			return o, nil
		}
	}
	return 0, fmt.Errorf("%w: %s: unknown result %q", ErrBadReply, c.subj[protocol.ReplayClaim], rep.Result)
}
