package client

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/protocol"
)

// ClaimReplay sends <prefix>.v1.replay.claim: the replay nonce (namespace,
// key) is recorded until retainUntil (Unix seconds): protocol.Claimed,
// AlreadyClaimed (a replay; retention not refreshed) or Full (new, but the
// store is at capacity). ErrBadReply also for an unknown result.
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
