package owner

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// A granted reserve is answered only once the sync after its count's write
// returned; a failed sync is unavailable (an error, never a grant). A
// denied reserve, a release and a count wait for no sync: they grant
// nothing. Both ways a worker waits: a plain Syncer and the group sync.
func TestReserveWaitsForTheSync(t *testing.T) {
	t.Parallel()
	eachSyncWay(t, func(t *testing.T, g *gateSync, c *quota.Router) {
		ctx := testkit.Context(t)
		slot := protocol.ReserveRequest{Principal: "acme", Key: "jobs", Max: 1}

		type result struct {
			rep protocol.ReserveReply
			err error
		}
		done := make(chan result, 1)
		go func() {
			rep, err := c.Reserve(ctx, slot)
			done <- result{rep, err}
		}()
		testkit.Eventually(t, 5*time.Second, func() bool { return g.calls.Load() == 1 }, "the grant waits on the sync")
		select {
		case r := <-done:
			t.Fatalf("the reserve was answered before its sync returned: %+v %v", r.rep, r.err)
		case <-time.After(100 * time.Millisecond):
		}
		g.release()
		if r := <-done; r.err != nil || !r.rep.Granted || r.rep.Count != 1 {
			t.Fatalf("reserve: %+v %v, want granted with count 1", r.rep, r.err)
		}

		// Nothing granted, nothing synced.
		if rep, err := c.Reserve(ctx, slot); err != nil || rep.Granted || rep.Count != 1 {
			t.Fatalf("a reserve at max: %+v %v, want denied with count 1", rep, err)
		}
		if rep, err := c.Release(ctx, protocol.CounterRequest{Principal: "acme", Key: "jobs"}); err != nil || rep.Count != 0 {
			t.Fatalf("release: %+v %v", rep, err)
		}
		if rep, err := c.Count(ctx, protocol.CounterRequest{Principal: "acme", Key: "jobs"}); err != nil || rep.Count != 0 {
			t.Fatalf("count: %+v %v", rep, err)
		}
		if n := g.calls.Load(); n != 1 {
			t.Fatalf("%d syncs after a denial, a release and a count, want none beyond the grant's", n-1)
		}

		// A named slot renewed by its holder is a grant: synced too.
		named := protocol.ReserveRequest{Principal: "acme", Key: "named", Max: 1, RequestID: "job-1"}
		for i := range 2 {
			if rep, err := c.Reserve(ctx, named); err != nil || !rep.Granted {
				t.Fatalf("named reserve %d: %+v %v", i, rep, err)
			}
		}
		if n := g.calls.Load(); n != 3 {
			t.Fatalf("%d syncs for a named slot's grant and its renewal, want 2", n-1)
		}

		g.fail.Store(true)
		rep, err := c.Reserve(ctx, protocol.ReserveRequest{Principal: "acme", Key: "other", Max: 1})
		if !errors.Is(err, protocol.ErrUnavailable) || rep.Granted {
			t.Fatalf("a reserve whose sync failed: %+v %v, want protocol.ErrUnavailable and no grant", rep, err)
		}
	})
}
