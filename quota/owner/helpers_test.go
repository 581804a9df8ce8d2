package owner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/gcra"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLeaseTTL keeps failover tests fast; assertions are made against it.
const testLeaseTTL = 2 * time.Second

var prefixSeq atomic.Int64

// newPrefix gives every test its own subjects and buckets on a shared server.
func newPrefix() string { return fmt.Sprintf("qt%d", prefixSeq.Add(1)) }

// fleetEnv is the shared state of one test's fleet: a prefix, its buckets
// (opened through one connection) and the claims store on them.
type fleetEnv struct {
	prefix   string
	replicas int // of the buckets (0: 1)
	leases   *kvstore.Bucket
	counts   *kvstore.Bucket
	claims   *kvstore.Bucket
	store    claims.Store
}

// newFleetEnv makes a fresh prefix's buckets with the given replicas (0:
// 1) through open.
func newFleetEnv(t testing.TB, replicas int, open func(t testing.TB, cfg kvstore.BucketConfig) *kvstore.Bucket) *fleetEnv {
	t.Helper()
	p := newPrefix()
	names := kvstore.BucketNames(p)
	e := &fleetEnv{
		prefix:   p,
		replicas: replicas,
		leases:   open(t, quota.LeasesBucket(p, max(replicas, 1))),
		counts:   open(t, quota.CountsBucket(p, max(replicas, 1))),
		claims:   open(t, kvstore.BucketConfig{Name: names.Claims, Replicas: replicas}),
	}
	e.store = testkit.ClaimsKV(t, e.claims)
	return e
}

// kitEnv starts one server and a fresh env's buckets on it.
func kitEnv(t testing.TB) (*testkit.Kit, *fleetEnv) {
	t.Helper()
	k := testkit.New(t)
	return k, newFleetEnv(t, 0, func(t testing.TB, cfg kvstore.BucketConfig) *kvstore.Bucket { return k.Bucket(t, cfg) })
}

// clusterEnv is a fresh env's buckets on cl, replicated replicas times.
func clusterEnv(t testing.TB, cl *testkit.ClusterKit, replicas int) *fleetEnv {
	t.Helper()
	return newFleetEnv(t, replicas, func(t testing.TB, cfg kvstore.BucketConfig) *kvstore.Bucket { return cl.Bucket(t, 0, cfg) })
}

// connect opens another connection to k's server (a worker or client of
// its own), closed in t.Cleanup.
func connect(t testing.TB, k *testkit.Kit) *nats.Conn {
	t.Helper()
	nc, err := k.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// bucketsOn reopens the env's buckets through another connection's
// JetStream (each worker talks to KV over its own connection).
func (e *fleetEnv) bucketsOn(t testing.TB, nc *nats.Conn) (leases, counts *kvstore.Bucket, store claims.Store) {
	t.Helper()
	js := testkit.JetStream(t, nc)
	ctx := testkit.Context(t)
	var err error
	if leases, err = kvstore.OpenBucket(ctx, js, quota.LeasesBucket(e.prefix, e.replicas)); err != nil {
		t.Fatal(err)
	}
	if counts, err = kvstore.OpenBucket(ctx, js, quota.CountsBucket(e.prefix, e.replicas)); err != nil {
		t.Fatal(err)
	}
	cb, err := kvstore.OpenBucket(ctx, js, kvstore.BucketConfig{Name: kvstore.BucketNames(e.prefix).Claims, Replicas: e.replicas})
	if err != nil {
		t.Fatal(err)
	}
	return leases, counts, testkit.ClaimsKV(t, cb)
}

// newMemory is claims.NewMemory failing the test on an error.
func newMemory(t testing.TB) *claims.Memory {
	t.Helper()
	return testkit.Must(claims.NewMemory())(t)
}

// newWorker starts a worker on nc over the env's own bucket handles and
// the given claims store, and stops it in t.Cleanup.
func (e *fleetEnv) newWorker(t testing.TB, nc *nats.Conn, store claims.Store, opts ...Option) *Worker {
	t.Helper()
	return e.runWorker(t, nc, e.leases, e.counts, store, opts)
}

// runWorker starts a worker of the env (its prefix, testLeaseTTL, then
// opts) on nc over the given buckets and store, and stops it in t.Cleanup.
func (e *fleetEnv) runWorker(t testing.TB, nc *nats.Conn, leases, counts *kvstore.Bucket, store claims.Store, opts []Option) *Worker {
	t.Helper()
	w, err := New(nc, leases, counts, store, append([]Option{quota.WithPrefix(e.prefix), WithLeaseTTL(testLeaseTTL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	startStopped(t, w)
	return w
}

// mustLimiter is gcra.NewLimiter failing the test on an error.
func mustLimiter(t testing.TB) *gcra.Limiter {
	t.Helper()
	return testkit.Must(gcra.NewLimiter())(t)
}

// startWorker starts a worker on nc (its own buckets handles) and stops it
// in t.Cleanup.
func (e *fleetEnv) startWorker(t testing.TB, nc *nats.Conn, opts ...Option) *Worker {
	t.Helper()
	leases, counts, store := e.bucketsOn(t, nc)
	return e.runWorker(t, nc, leases, counts, store, opts)
}

// startStopped starts w and stops it in t.Cleanup.
func startStopped(t testing.TB, w *Worker) {
	t.Helper()
	if err := w.Start(testkit.Context(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
}

func (e *fleetEnv) client(t testing.TB, nc *nats.Conn, opts ...quota.RouterOption) *quota.Router {
	t.Helper()
	c, err := quota.NewRouter(nc, append([]quota.RouterOption{quota.WithPrefix(e.prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitServed waits until every partition is served by exactly one of ws.
func waitServed(t testing.TB, timeout time.Duration, ws ...*Worker) {
	t.Helper()
	testkit.Eventually(t, timeout, func() bool { return allServed(ws...) }, "every partition served exactly once")
}

func allServed(ws ...*Worker) bool {
	seen := make(map[int]int)
	p := protocol.DefaultPartitions
	for _, w := range ws {
		p = w.cfg.Partitions
		for _, n := range w.Partitions() {
			seen[n]++
		}
	}
	if len(seen) != p {
		return false
	}
	for _, c := range seen {
		if c != 1 {
			return false
		}
	}
	return true
}

// ownerOf returns the index in ws of the worker serving partition n, or -1.
func ownerOf(n int, ws ...*Worker) int {
	for i, w := range ws {
		if w == nil {
			continue
		}
		for _, m := range w.Partitions() {
			if m == n {
				return i
			}
		}
	}
	return -1
}

// hooks is a unit "hooks" charge with the given burst at a rate so slow
// that nothing refills during a test.
func hooks(tenant string, burst int64) protocol.Charge {
	inc := int64(time.Hour / time.Microsecond)
	return protocol.Charge{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: inc, CapacityUs: inc * burst}
}

// single starts one server, the env's buckets on it, one worker (with
// opts) and a client; it waits until the worker serves every partition.
func single(t testing.TB, opts ...Option) (*testkit.Kit, *fleetEnv, *Worker, *quota.Router) {
	t.Helper()
	k, e := kitEnv(t)
	w := e.startWorker(t, k.Conn, opts...)
	waitServed(t, 10*time.Second, w)
	return k, e, w, e.client(t, k.Conn)
}

// waitNewOwner waits until a worker of ws other than old serves n, and
// returns its index.
func waitNewOwner(t *testing.T, n, old int, ws []*Worker) int {
	t.Helper()
	owner := -1
	testkit.Eventually(t, testLeaseTTL+5*time.Second, func() bool {
		owner = ownerOf(n, ws...)
		return owner >= 0 && owner != old
	}, "a new owner")
	return owner
}

// tally counts the outcomes of hits: failed (an error), ok (admitted;
// local of them by a Fleet's fallback) and denied (any other result).
type tally struct{ failed, ok, local, denied atomic.Int64 }

func (c *tally) add(rep protocol.HitReply, err error) {
	switch {
	case err != nil:
		c.failed.Add(1)
	case rep.Result == protocol.ResultOK:
		c.ok.Add(1)
		if rep.Fallback {
			c.local.Add(1)
		}
	default:
		c.denied.Add(1)
	}
}

// load is the goroutines of a test's background traffic; stop ends them
// and waits for them.
type load struct {
	done chan struct{}
	wg   sync.WaitGroup
}

func newLoad() *load { return &load{done: make(chan struct{})} }

// loop runs call(i) over and over in n goroutines (i their index) until stop.
func (l *load) loop(n int, call func(i int)) {
	for i := range n {
		l.wg.Go(func() {
			for {
				select {
				case <-l.done:
					return
				default:
				}
				call(i)
			}
		})
	}
}

// every runs call in one goroutine at most once per d (a call that took
// longer is not made up for) until stop.
func (l *load) every(d time.Duration, call func()) {
	l.wg.Go(func() {
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-timer.C:
			}
			timer.Reset(d)
			call()
		}
	})
}

func (l *load) stop() {
	close(l.done)
	l.wg.Wait()
}

// reserveRace makes n reserves of r at once, the i-th through
// cs[i%len(cs)], and returns how many were granted; a denied one must
// report the count at r.Max.
func reserveRace(t *testing.T, cs []*quota.Router, r protocol.ReserveRequest, n int) int64 {
	t.Helper()
	ctx := testkit.Context(t)
	var granted atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rep, err := cs[i%len(cs)].Reserve(ctx, r)
			switch {
			case err != nil:
				t.Error(err)
			case rep.Granted:
				granted.Add(1)
			case rep.Count != r.Max:
				t.Errorf("denied with count %d, want %d", rep.Count, r.Max)
			}
		})
	}
	wg.Wait()
	return granted.Load()
}

// wantRefused sends data to subject and wants the owner's 400: micro's
// error code 400 and a reason (what names the request).
func wantRefused(t *testing.T, nc *nats.Conn, subject string, data []byte, what string) {
	t.Helper()
	msg, err := nc.Request(subject, data, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if msg.Header.Get(micro.ErrorCodeHeader) != "400" || msg.Header.Get(micro.ErrorHeader) == "" {
		t.Fatalf("%s: reply headers %v, want a 400 with a reason", what, msg.Header)
	}
}
