package forward

import (
	"context"

	"github.com/sluice-dev/sluice/protocol"
)

// Hitter is the quota call a leaf admits hooks with (quota.Fleet).
type Hitter interface {
	Hit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error)
}

// Admission is a leaf's admission: the Fleet's hit (its Router routed to
// the hub's owners while Route says so, else the leaf's own state), and
// where the hit's claim was taken told to Claims. A hit the hub's owners
// answered (not Fallback) took its claim in the hub's bucket, so the hook's
// settle or release goes there; a Fallback hit took it through Claims, which
// knows already.
type Admission struct {
	Fleet  Hitter
	Claims *Claims
}

// Hit is Fleet.Hit, remembering a claim the hub's owners took.
func (a Admission) Hit(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error) {
	rep, err := a.Fleet.Hit(ctx, r)
	if err == nil && r.Claim != nil && !rep.Fallback && rep.Result == protocol.ResultOK {
		a.Claims.takenOnHub(r.Claim.HookID)
	}
	return rep, err
}
