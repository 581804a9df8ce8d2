package client

import (
	"context"
	"fmt"

	"github.com/sluice-dev/sluice/claims"
)

// replayRequest is the body of replay.claim. RetainUntil is always sent:
// 0 is a valid instant.
type replayRequest struct {
	Namespace   string `json:"namespace"`
	Key         string `json:"key"`
	RetainUntil int64  `json:"retain_until"`
}

// replayReply is the reply of replay.claim.
type replayReply struct {
	Result string `json:"result"`
}

// ClaimReplay sends <prefix>.v1.replay.claim: the replay nonce (namespace,
// key) is recorded until retainUntil (Unix seconds; a caller allowing for
// clock skew adds it). The outcome is a value: claims.Claimed (new, now held),
// claims.AlreadyClaimed (seen before: a replay; retention is not
// refreshed) or claims.Full (new, but the store is at its capacity).
//
// Errors: ErrInvalid (namespace or key not 1..256 bytes, retainUntil
// outside 0..253402300799), ErrUnavailable, ErrInternal, ErrBadReply (also
// for a result this client does not know).
func (c *Client) ClaimReplay(ctx context.Context, namespace, key string, retainUntil int64) (claims.ReplayOutcome, error) {
	var rep replayReply
	req := replayRequest{Namespace: namespace, Key: key, RetainUntil: retainUntil}
	if err := c.call(ctx, c.subj.replay, c.timeout, req, &rep); err != nil {
		return 0, err
	}
	for _, o := range []claims.ReplayOutcome{claims.Claimed, claims.AlreadyClaimed, claims.Full} {
		if rep.Result == o.String() {
			return o, nil
		}
	}
	return 0, fmt.Errorf("%w: %s: unknown result %q", ErrBadReply, c.subj.replay, rep.Result)
}
