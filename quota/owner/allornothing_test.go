package owner

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// TestAllOrNothingOnBothPaths holds the owner (tenure.charge) and the
// Fleet's node-local fallback (gcra.Limiter.ChargeAll), which share
// gcra.Decide, to the same answers for the same hits: a two-charge hit
// whose second charge is denied spends neither, so the first charge alone
// is still admitted once, then denied.
func TestAllOrNothingOnBothPaths(t *testing.T) {
	t.Parallel()
	k, e, _, owner := single(t)
	unreachable := e.client(t, k.Conn, quota.WithReachable(func() bool { return false }))
	fleet, err := quota.NewFleet(unreachable, mustLimiter(t), e.store)
	if err != nil {
		t.Fatal(err)
	}
	hour := int64(time.Hour / time.Microsecond) // nothing refills during the test
	bytes := protocol.Charge{Kind: protocol.KindBytes, Tenant: "aon", IncrementUs: hour, CapacityUs: hour}
	steps := []struct {
		name    string
		charges []protocol.Charge
		want    string
	}{
		{"bytes spent", []protocol.Charge{bytes}, protocol.ResultOK},
		{"hooks fits, bytes denied", []protocol.Charge{hooks("aon", 1), bytes}, protocol.ResultRateLimited},
		{"hooks alone: not spent by the denied pair", []protocol.Charge{hooks("aon", 1)}, protocol.ResultOK},
		{"hooks alone again", []protocol.Charge{hooks("aon", 1)}, protocol.ResultRateLimited},
	}
	ctx := testkit.Context(t)
	for i, s := range steps {
		var reps [2]protocol.HitReply
		for p, hit := range []func(context.Context, protocol.HitRequest) (protocol.HitReply, error){owner.Hit, fleet.Hit} {
			rep, err := hit(ctx, protocol.HitRequest{Charges: s.charges})
			if err != nil || rep.Result != s.want || rep.Fallback != (p == 1) {
				t.Fatalf("step %d (%s), path %d (0 owner, 1 fallback): %+v %v, want %s", i, s.name, p, rep, err, s.want)
			}
			reps[p] = rep
		}
		// The same wait on both paths (they decide a few ms apart).
		if d := reps[0].RetryAfterMs - reps[1].RetryAfterMs; d < -1000 || d > 1000 {
			t.Fatalf("step %d (%s): retry after %d ms (owner) vs %d ms (fallback)", i, s.name, reps[0].RetryAfterMs, reps[1].RetryAfterMs)
		}
	}
}
