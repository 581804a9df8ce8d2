package events_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const prefix = "sluice"

// env is one embedded server with the claims bucket and a store on it.
type env struct {
	k      *testkit.Kit
	bucket *kvstore.Bucket
	store  claims.Store
	subj   protocol.Subjects
}

func newEnv(t *testing.T, opts ...testkit.Option) *env {
	t.Helper()
	k := testkit.New(t, opts...)
	b := k.Bucket(t, kvstore.BucketConfig{Name: kvstore.BucketNames(prefix).Claims, LimitMarkerTTL: time.Second})
	subj, err := protocol.NewSubjects(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return &env{k: k, bucket: b, store: newStore(t, b), subj: subj}
}

// publisher returns a Publisher on a connection of its own (a "node"),
// closed with the test.
func (e *env) publisher(t *testing.T, opts ...events.PublisherOption) *events.Publisher {
	t.Helper()
	return newPublisher(t, e.k.Connect(t), opts...)
}

// newPublisher returns a Publisher on nc, closed with the test.
func newPublisher(t *testing.T, nc *nats.Conn, opts ...events.PublisherOption) *events.Publisher {
	t.Helper()
	p, err := events.NewPublisher(nc, prefix, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// started returns a function that starts the component a constructor
// returned (failing the test on the constructor's error or Start's) and
// stops it with the test: started[*events.Settler](t)(events.NewSettler(…)).
func started[C interface {
	Start(context.Context) error
	Stop()
}](t *testing.T) func(C, error) C {
	return func(c C, err error) C {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(testkit.Context(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		return c
	}
}

// settleEvent publishes ev to subject on core NATS, like any client would.
func (e *env) publishEvent(t *testing.T, subject string, ev any) {
	t.Helper()
	var data []byte
	switch v := ev.(type) {
	case []byte:
		data = v
	default:
		var err error
		if data, err = json.Marshal(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.k.Conn.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
	if err := e.k.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (e *env) claim(t *testing.T, id claims.ID, hookID string, ttl time.Duration) uint64 {
	t.Helper()
	return claimOK(t, testkit.Context(t), e.store, id, hookID, ttl)
}

// claimOK claims id for hookID on st, which must answer OK, and returns
// the claim's revision.
func claimOK(t *testing.T, ctx context.Context, st claims.Store, id claims.ID, hookID string, ttl time.Duration) uint64 {
	t.Helper()
	res, err := st.Claim(ctx, id, hookID, ttl)
	if err != nil || res.Outcome != claims.OK {
		t.Fatalf("claim %+v: %+v %v", id, res, err)
	}
	return res.Revision
}

func (e *env) state(t *testing.T, id claims.ID) claims.State {
	t.Helper()
	st, err := e.store.Get(testkit.Context(t), id)
	if err != nil {
		t.Fatalf("get %+v: %v", id, err)
	}
	return st
}

// sink records every message on the events subjects.
type sink struct {
	mu   sync.Mutex
	msgs []sunk
}

type sunk struct {
	subject string
	ev      protocol.Lifecycle
	raw     []byte
}

func (e *env) sink(t *testing.T) *sink {
	t.Helper()
	s := &sink{}
	sub, err := e.k.Conn.Subscribe(e.subj.Events(), func(m *nats.Msg) {
		var ev protocol.Lifecycle
		_ = json.Unmarshal(m.Data, &ev)
		s.mu.Lock()
		s.msgs = append(s.msgs, sunk{subject: m.Subject, ev: ev, raw: m.Data})
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.k.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return s
}

func (s *sink) on(subject string) []sunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sunk
	for _, m := range s.msgs {
		if m.subject == subject {
			out = append(out, m)
		}
	}
	return out
}

func (s *sink) count(subject string) int { return len(s.on(subject)) }

// metric reads a counter from reg: the sum over series whose labels include
// every pair in labels.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// countingStore counts calls to the store it wraps and can fail the first
// calls with a given error.
type countingStore struct {
	claims.Store
	settles, releases atomic.Int64
	failFirst         atomic.Int64 // calls still to fail with failWith
	failWith          error
}

func (c *countingStore) fail() error {
	if c.failFirst.Add(-1) >= 0 {
		return c.failWith
	}
	return nil
}

func (c *countingStore) Settle(ctx context.Context, id claims.ID, hookID string, rev uint64, ttl time.Duration) error {
	c.settles.Add(1)
	if err := c.fail(); err != nil {
		return err
	}
	return c.Store.Settle(ctx, id, hookID, rev, ttl)
}

func (c *countingStore) Release(ctx context.Context, id claims.ID, hookID string, rev uint64) error {
	c.releases.Add(1)
	if err := c.fail(); err != nil {
		return err
	}
	return c.Store.Release(ctx, id, hookID, rev)
}

// newStore is the store under test: the real KV claims store.
func newStore(t testing.TB, b *kvstore.Bucket) claims.Store { return testkit.ClaimsKV(t, b) }
