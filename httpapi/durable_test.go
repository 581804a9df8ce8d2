package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/fx"

	"github.com/sluice-dev/sluice/durability"
	sluicefx "github.com/sluice-dev/sluice/fx"
)

// A hook whose sync fails is answered 503, never 2xx, and so is every later
// one, the redelivery of its key included (the latch: after a failed fsync
// no round can vouch for the page cache); /readyz says why.
func TestFailedSyncIs503(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	eio := errors.New("input/output error")
	// The narrow seam: the barrier's round, the real store sync unless the
	// test says it fails.
	seam := fx.Decorate(func(lc fx.Lifecycle, n *sluicefx.NATS) *sluicefx.NATS {
		real := n.Group
		g := durability.NewGroupSync(func() error {
			if fail.Load() {
				return eio
			}
			return real.Sync(context.Background())
		})
		lc.Append(fx.StopHook(g.Close))
		n.Sync, n.Group = g, g
		return n
	})
	a := startAppWith(t, t.TempDir(), testYAML, []fx.Option{seam})
	req, err := http.NewRequest(http.MethodGet, a.url+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := a.do(req); r.body["durability"] != "synced" {
		t.Fatalf("/readyz %v: want durability synced", r.body)
	}
	key := map[string]string{"Idempotency-Key": "evt-sync"}
	mustStatus(t, a.post("/v1/hooks/t1/s", []byte(`{"n":1}`), nil), 202)
	fail.Store(true)
	r := a.post("/v1/hooks/t1/s", []byte(`{"n":2}`), key)
	mustStatus(t, r, 503)
	if r.body["error"] != "store_unavailable" {
		t.Fatalf("body %v", r.body)
	}
	fail.Store(false)
	// The key's claim was settled before the barrier: its redelivery is a
	// duplicate of a hook not known durable, so it waits on the barrier
	// too, which stays failed.
	mustStatus(t, a.post("/v1/hooks/t1/s", []byte(`{"n":2}`), key), 503)
	mustStatus(t, a.post("/v1/hooks/t1/s", []byte(`{"n":3}`), nil), 503)
	res, err := http.Get(a.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 503 || !strings.Contains(string(b), "sync failed") {
		t.Fatalf("/readyz after a failed sync: %d %s", res.StatusCode, b)
	}
}

// Concurrent hooks share sync rounds: the group sync's rounds grow
// far slower than the hooks answered 202 (each of which waited on it). The
// share per round grows with the hooks in flight: 64 of them keep it well
// above 2 (at 32 a round lasting about as long as a hook's own work left
// it near 2, and the test failed once in CI: 131 rounds for 256 waits).
func TestConcurrentHooksShareSyncRounds(t *testing.T) {
	t.Parallel()
	a := startApp(t, testYAML)
	g := a.nats.Group
	if g == nil || a.nats.Sync == nil {
		t.Fatal("the default node has no group sync")
	}
	before := g.Stats()
	const clients, each = 64, 4
	var wg sync.WaitGroup
	var accepted atomic.Int64
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				req, err := http.NewRequest(http.MethodPost, a.url+"/v1/hooks/t1/s", strings.NewReader(fmt.Sprintf(`{"c":%d,"i":%d}`, c, i)))
				if err != nil {
					t.Error(err)
					return
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == 202 {
					accepted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	after := g.Stats()
	rounds, waits := after.Rounds-before.Rounds, after.Waits-before.Waits
	t.Logf("%d hooks accepted, %d waits, %d sync rounds taking %s", accepted.Load(), waits, rounds, after.Time-before.Time)
	if accepted.Load() != clients*each || waits < clients*each {
		t.Fatalf("accepted %d, waits %d: want %d each", accepted.Load(), waits, clients*each)
	}
	if rounds*2 > waits {
		t.Fatalf("%d sync rounds for %d waits: concurrent hooks do not share rounds", rounds, waits)
	}
}
