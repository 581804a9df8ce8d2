package quota

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota/internal/frame"
	"github.com/sluice-dev/sluice/testkit"
)

// fakeOwner answers every hit frame on the prefix's partition and member
// subjects OK, naming route(i) (i counts replies) as its route.
func fakeOwner(t *testing.T, nc *nats.Conn, prefix string, route func(i int) string) *atomic.Int64 {
	t.Helper()
	var served atomic.Int64
	answer := func(m *nats.Msg) {
		items, err := frame.DecodeRequest(m.Data, nil)
		if err != nil {
			t.Errorf("fake owner: %v", err)
			return
		}
		i := int(served.Add(1))
		b := frame.AppendReplyHeader(nil, false, route(i), len(items))
		for k, it := range items {
			b = frame.AppendAnswer(b, &frame.Answer{Index: k, Result: frame.ResultOK, Limits: make([]frame.Limit, len(it.Charges))})
		}
		_ = m.Respond(b)
	}
	for _, s := range []string{prefix + ".v1.quota.p.*", prefix + ".v1.quota.m.*"} {
		sub, err := nc.Subscribe(s, answer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &served
}

// An owner's reply routes a client's later hits only to the prefix's own
// member subjects: a reply naming any other subject — another
// service's, another prefix's, a wildcard — is answered but not followed.
func TestClientFollowsOnlyMemberRoutes(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	prefix := newPrefix()
	evil := []string{
		"sluice.v1.claims.release", prefix + ".v1.claims.release", "other.v1.quota.m.x",
		prefix + ".v1.quota.m.a.b", prefix + ".v1.quota.m.*", prefix + ".v1.quota.m.>", prefix + ".v1.quota.m.",
		prefix + ".v1.quota.m.=2", prefix + ".v1.quota.m.=2e", prefix + ".v1.quota.m.a b", prefix + ".v1.quota.p.3",
	}
	var stolen atomic.Int64
	for _, s := range evil {
		sub, err := k.Conn.Subscribe(s, func(*nats.Msg) { stolen.Add(1) })
		if err != nil {
			continue // not a subject one can subscribe to (nor publish to)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	owner, err := k.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	served := fakeOwner(t, owner, prefix, func(i int) string { return evil[i%len(evil)] })
	c := e2client(t, k, prefix)
	for i := range 3 * len(evil) {
		rep, err := c.Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks("acme", 10)}})
		if err != nil || rep.Result != protocol.ResultOK {
			t.Fatalf("hit %d: %+v %v", i, rep, err)
		}
	}
	if n := stolen.Load(); n != 0 {
		t.Fatalf("%d hits followed a route that is not one of the prefix's member subjects", n)
	}
	if got, want := served.Load(), int64(3*len(evil)); got != want {
		t.Fatalf("the owner served %d frames, want %d", got, want)
	}
	if n := c.co.Members(); n != 0 {
		t.Fatalf("%d member lanes learned from routes that are not member subjects", n)
	}
}

// An owner advertising a new member subject in every reply cannot grow
// the client's member table beyond one lane per partition.
func TestClientMemberTableBounded(t *testing.T) {
	t.Parallel()
	k := testkit.New(t)
	prefix := newPrefix()
	owner, err := k.Server.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(owner.Close)
	served := fakeOwner(t, owner, prefix, func(i int) string { return MemberSubject(prefix, "m"+strconv.Itoa(i)) })
	const p = 4
	c := e2client(t, k, prefix, WithPartitions(p))
	for i := range 200 {
		tenant := "t" + strconv.Itoa(i)
		rep, err := c.Hit(context.Background(), protocol.HitRequest{Charges: []protocol.Charge{hooks(tenant, 10)}})
		if err != nil || rep.Result != protocol.ResultOK {
			t.Fatalf("hit %d: %+v %v", i, rep, err)
		}
		if n := c.co.Members(); n > p {
			t.Fatalf("after %d replies the member table holds %d lanes, above one per partition (%d)", i+1, n, p)
		}
	}
	// The routes were followed (a member subject is trusted).
	if served.Load() != 200 || c.co.Members() == 0 {
		t.Fatalf("served %d, %d member lanes", served.Load(), c.co.Members())
	}
}

// e2client is a coalescing client of prefix on k with a short budget.
func e2client(t *testing.T, k *testkit.Kit, prefix string, opts ...RouterOption) *Router {
	t.Helper()
	c, err := NewRouter(k.Conn, append([]RouterOption{WithPrefix(prefix), WithBudget(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIsMemberSubject(t *testing.T) {
	for s, want := range map[string]bool{
		"px.v1.quota.m.one": true, "px.v1.quota.m.a=2Eb": true, "px.v1.quota.m.=": false,
		"px.v1.quota.m.": false, "px.v1.quota.m.a.b": false, "px.v1.quota.m.*": false, "px.v1.quota.p.1": false,
		"py.v1.quota.m.one": false, "px.v1.quota.m." + string(make([]byte, 129)): false,
	} {
		if got := isMemberSubject("px", []byte(s)); got != want {
			t.Errorf("%q: %v, want %v", s, got, want)
		}
	}
	long := make([]byte, MaxMemberIDBytes)
	for i := range long {
		long[i] = 'a'
	}
	if !isMemberSubject("px", []byte(MemberSubject("px", string(long)))) || isMemberSubject("px", []byte(MemberSubject("px", string(long)+"a"))) {
		t.Error("the member id bound is not WithMemberID's")
	}
}
