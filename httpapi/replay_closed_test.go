package httpapi_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/fx"

	"github.com/sluice-dev/sluice/claims"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/protocol"
)

// downReplay is the node's real replay store with a switch: while down,
// every claim fails as the store being unavailable.
type downReplay struct {
	claims.ReplayStore
	down   atomic.Bool
	tried  atomic.Int64
	failed atomic.Int64
}

func (d *downReplay) Claim(ctx context.Context, ns, key string, retainUntil int64) (protocol.ReplayOutcome, error) {
	d.tried.Add(1)
	if d.down.Load() {
		d.failed.Add(1)
		return 0, fmt.Errorf("%w: replay bucket: no responders", protocol.ErrUnavailable)
	}
	return d.ReplayStore.Claim(ctx, ns, key, retainUntil)
}

// TestReplayFailsClosed: a signed request whose nonce the replay store
// cannot claim is answered 503 with Retry-After and stored nowhere — its
// nonce is not claimed in the node's memory instead, which on a fleet
// would let another node admit it a second time. Once the store answers,
// the resend is accepted once, and sent again it is a replay.
func TestReplayFailsClosed(t *testing.T) {
	t.Parallel()
	replay := &downReplay{}
	seam := fx.Decorate(func(s *sluicefx.Stores) *sluicefx.Stores {
		replay.ReplayStore = s.Replay
		s.Replay = replay
		return s
	})
	a := startAppWith(t, t.TempDir(), testYAML, []fx.Option{seam})
	body := []byte(`{"type":"x"}`)
	h := signedSW(t, "msg_down", time.Now().Unix(), body)

	replay.down.Store(true)
	for range 2 {
		r := a.post("/v1/hooks/acme/sw", body, h)
		mustStatus(t, r, 503)
		if r.body["error"] != protocol.StoreUnavailable.Code || r.hdr.Get("Retry-After") == "" {
			t.Fatalf("replay store down: %d %v, Retry-After %q; want 503 store_unavailable with Retry-After", r.code, r.body, r.hdr.Get("Retry-After"))
		}
	}
	if replay.failed.Load() != 2 {
		t.Fatalf("%d claims failed, want 2: the requests did not reach the replay store", replay.failed.Load())
	}
	if n := len(a.stored()); n != 0 {
		t.Fatalf("%d hooks stored while their nonce could not be claimed", n)
	}

	replay.down.Store(false)
	mustStatus(t, a.post("/v1/hooks/acme/sw", body, h), 202)
	mustStatus(t, a.post("/v1/hooks/acme/sw", body, h), 401)
}
