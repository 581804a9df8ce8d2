package fx_test

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	uberfx "go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/hooks"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

func start(t *testing.T, args ...string) (*sluicefx.HTTP, *sluicefx.NATS, *fxtest.App) {
	t.Helper()
	cfg, err := config.Parse(append([]string{"--http-addr", "127.0.0.1:0", "--partitions", "4"}, args...), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var h *sluicefx.HTTP
	var n *sluicefx.NATS
	app := fxtest.New(t, sluicefx.Options(context.Background(), cfg, testkit.Log()), uberfx.Populate(&h, &n))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	return h, n, app
}

// startErr is startNodeErr's HTTP and NATS parts.
func startErr(t testing.TB, args ...string) (*sluicefx.HTTP, *sluicefx.NATS, error) {
	nd, err := startNodeErr(t, args...)
	if err != nil {
		return nil, nil, err
	}
	return nd.h, nd.n, nil
}

// node is one sluice app of a leaf-mode test, stopped by stop (once).
type node struct {
	h    *sluicefx.HTTP
	n    *sluicefx.NATS
	fw   *sluicefx.Forward
	q    *sluicefx.Quota
	stop func()
}

// startNode starts a sluice app with args; the test's cleanup stops it if
// the test did not.
func startNode(t testing.TB, args ...string) *node {
	t.Helper()
	nd, err := startNodeErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return nd
}

// startNodeErr is startNode returning its error (for starts on other
// goroutines).
func startNodeErr(t testing.TB, args ...string) (*node, error) {
	return startNodeLog(t, testkit.Log(), args...)
}

// startNodeLog is startNodeErr logging to log (testkit.StartTogether's
// node log).
func startNodeLog(t testing.TB, log *slog.Logger, args ...string) (*node, error) {
	cfg, err := config.Parse(append([]string{"--http-addr", "127.0.0.1:0", "--partitions", "4", "--nats-listen", "off"}, args...),
		nil, nil)
	if err != nil {
		return nil, err
	}
	nd := &node{}
	app := uberfx.New(sluicefx.Options(context.Background(), cfg, log), uberfx.Populate(&nd.h, &nd.n, &nd.fw, &nd.q))
	if err := app.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		return nil, err
	}
	var once sync.Once
	nd.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := app.Stop(ctx); err != nil {
				// fx skips the hooks left once its context is done: shut
				// the embedded server down here, so that a slow stop
				// does not leave its goroutines to the leak check.
				t.Logf("node stop: %v; closing its connection and server", err)
				nd.n.Conn.Close()
				if nd.n.Server != nil {
					nd.n.Server.Shutdown()
				}
			}
		})
	}
	t.Cleanup(nd.stop)
	return nd, nil
}

// waitOutboxDrained waits until edge node ed's outbox holds no hook,
// failing once it has not shrunk for stalled: a loaded machine drains it
// slower, an outbox that stopped draining fails alike.
func waitOutboxDrained(t *testing.T, ed *node, stalled time.Duration) {
	t.Helper()
	least, since := uint64(math.MaxUint64), time.Now()
	for ; ; time.Sleep(10 * time.Millisecond) {
		st, err := ed.n.JS.Stream(testkit.Context(t), hooks.OutboxStream("HOOKS"))
		if err == nil {
			n := st.CachedInfo().State.Msgs // Stream read the info
			if n == 0 {
				return
			}
			if n < least {
				least, since = n, time.Now()
			}
		}
		if time.Since(since) > stalled {
			t.Fatalf("outbox not drained: %d hooks in it, none forwarded for %s (last error %v)", least, stalled, err)
		}
	}
}
