package durability_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/durability"
	"github.com/sluice-dev/sluice/internal/jstest"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

const nodeSyncSubject = "t.node.v1.sync"

// servedNode is one server's side of the cluster's group sync, its
// rounds counted.
type servedNode struct {
	rounds atomic.Int64
	fail   atomic.Bool
}

func serveNode(t *testing.T, c *testkit.ClusterKit, i int, streams []string) *servedNode {
	t.Helper()
	n := &servedNode{}
	srv := c.Server(i)
	g := kvstore.NewGroupSync(func() error {
		n.rounds.Add(1)
		if n.fail.Load() {
			return errors.New("input/output error")
		}
		return srv.SyncStore()
	})
	t.Cleanup(g.Close)
	s, err := durability.Serve(c.Connect(t, i), nodeSyncSubject, "", g.Then, srv.NodeAnswer(streams))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return n
}

// TestRounds: a barrier round on one node runs a round of every
// server's own group sync and succeeds when every stream's leader
// answered; a stream whose server is down is unconfirmed (a 503 for the
// hooks that wrote to it, not for the others), and without a majority of
// the servers nothing is.
func TestRounds(t *testing.T) {
	c := testkit.Cluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js := c.JetStream(t, 0)
	streams := []string{"S0", "S1", "S2"}
	for i, name := range streams {
		// One R1 stream on each server.
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"},
			Placement: &jetstream.Placement{Tags: []string{natsembed.PlacementTag(c.Server(i).NATS().Name())}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, strings.ToLower(name)+".x", []byte("hook")); err != nil {
			t.Fatal(err)
		}
	}
	nodes := make([]*servedNode, 3)
	for i := range nodes {
		nodes[i] = serveNode(t, c, i, streams)
	}
	srv0 := c.Server(0)
	r, err := durability.NewRounds(c.Connect(t, 0), nodeSyncSubject, clusterFuncs{srv0.ClusterPeers, func() ([]string, error) { return streams, nil }}, durability.WithRoundTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	durability.ReadClusterEveryRound(r)

	if err := r.Round(); err != nil {
		t.Fatalf("a round over a whole cluster: %v", err)
	}
	for i, n := range nodes {
		if n.rounds.Load() == 0 {
			t.Fatalf("server %d answered without a round of its own", i)
		}
	}

	// A server down: its stream is unconfirmed, the others are.
	c.Kill(2)
	err = r.Round()
	var u *durability.UnconfirmedError
	if !errors.As(err, &u) || !slices.Equal(u.Streams, []string{"S2"}) {
		t.Fatalf("a round with the server of S2 down: %v, want S2 unconfirmed", err)
	}

	// And a server whose own round fails: no majority is left.
	nodes[1].fail.Store(true)
	err = r.Round()
	if !errors.Is(err, durability.ErrNotConfirmed) || errors.As(err, &u) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("a round with one server down and one failing: %v, want no majority", err)
	}
}

// fakeNode answers sync requests on nc as server name with the given
// uptime, leads and error.
func fakeNode(t *testing.T, nc *nats.Conn, reply protocol.SyncReply) {
	t.Helper()
	b, err := json.Marshal(reply)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := nc.Subscribe(nodeSyncSubject, func(m *nats.Msg) { _ = m.Respond(b) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// TestRoundRules: what a round counts as confirmed, against
// answers made up at the seam (one server "a" in the cluster).
func TestRoundRules(t *testing.T) {
	one := func(bool) []string { return []string{"a"} }
	cases := []struct {
		name  string
		reply *protocol.SyncReply // nil: nobody answers
		want  string              // "" for a confirmed round
	}{
		{"confirmed", &protocol.SyncReply{Server: "a", UptimeNS: int64(time.Hour), Leads: []string{"S"}}, ""},
		{"its round failed", &protocol.SyncReply{Server: "a", UptimeNS: int64(time.Hour), Error: "input/output error"}, "input/output error"},
		// Started after the previous round began: it may have lost what
		// this round's hooks wrote.
		{"restarted", &protocol.SyncReply{Server: "a", UptimeNS: 1, Leads: []string{"S"}}, "started after"},
		{"nobody answers", nil, "not [a]"},
		// S exists: it must be confirmed by its leader, even never seen led.
		{"an existing stream nobody leads", &protocol.SyncReply{Server: "a", UptimeNS: int64(time.Hour)}, "streams [S] unconfirmed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, nc, _ := jstest.Start(t, func() (*natsembed.Server, error) {
				return natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir()})
			})
			if tc.reply != nil {
				fakeNode(t, nc, *tc.reply)
			}
			r, err := durability.NewRounds(nc, nodeSyncSubject, clusterFuncs{one, func() ([]string, error) { return []string{"S"}, nil }}, durability.WithRoundTimeout(200*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			err = r.Round()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("round: %v", err)
				}
				return
			}
			if !errors.Is(err, durability.ErrNotConfirmed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("round: %v, want ErrNotConfirmed with %q", err, tc.want)
			}
		})
	}
}

// TestRoundRequiresALeaderSeen: once a stream was confirmed by its
// leader, a round without that leader's answer fails, though every server
// that answered is fine.
func TestRoundRequiresALeaderSeen(t *testing.T) {
	_, nc, _ := jstest.Start(t, func() (*natsembed.Server, error) {
		return natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir()})
	})
	var leads atomic.Value
	leads.Store([]string{"S"})
	sub, err := nc.Subscribe(nodeSyncSubject, func(m *nats.Msg) {
		b, _ := json.Marshal(protocol.SyncReply{Server: "a", UptimeNS: int64(time.Hour), Leads: leads.Load().([]string)})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	r, err := durability.NewRounds(nc, nodeSyncSubject, clusterFuncs{func(bool) []string { return []string{"a"} }, func() ([]string, error) { return nil, nil }}, durability.WithRoundTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Round(); err != nil {
		t.Fatal(err)
	}
	leads.Store([]string(nil)) // S's leader gone
	if err := r.Round(); !errors.Is(err, durability.ErrNotConfirmed) || !strings.Contains(err.Error(), fmt.Sprint([]string{"S"})) {
		t.Fatalf("a round without S's leader: %v, want S unconfirmed", err)
	}
}

// TestRoundIgnoresStrangers: an answer for a server that is not in
// the cluster counts for nothing, whatever it claims to lead — here S,
// whose server b stopped answering — nor toward a majority.
func TestRoundIgnoresStrangers(t *testing.T) {
	_, nc, _ := jstest.Start(t, func() (*natsembed.Server, error) {
		return natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir()})
	})
	aReply, err := json.Marshal(protocol.SyncReply{Server: "a", UptimeNS: int64(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	var aSlow atomic.Bool
	aSub, err := nc.Subscribe(nodeSyncSubject, func(m *nats.Msg) {
		if aSlow.Load() {
			time.Sleep(50 * time.Millisecond) // the stranger answers first
		}
		_ = m.Respond(aReply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer aSub.Unsubscribe()
	b, err := json.Marshal(protocol.SyncReply{Server: "b", UptimeNS: int64(time.Hour), Leads: []string{"S"}})
	if err != nil {
		t.Fatal(err)
	}
	bSub, err := nc.Subscribe(nodeSyncSubject, func(m *nats.Msg) { _ = m.Respond(b) })
	if err != nil {
		t.Fatal(err)
	}
	// b stays among the servers up: it just does not answer any more.
	peers := func(bool) []string { return []string{"a", "b"} }
	r, err := durability.NewRounds(nc, nodeSyncSubject, clusterFuncs{peers, func() ([]string, error) { return nil, nil }}, durability.WithRoundTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	durability.ReadClusterEveryRound(r)
	if err := r.Round(); err != nil {
		t.Fatal(err)
	}
	_ = bSub.Unsubscribe()
	fakeNode(t, nc, protocol.SyncReply{Server: "x", UptimeNS: int64(time.Hour), Leads: []string{"S"}})
	aSlow.Store(true)
	if err := r.Round(); !errors.Is(err, durability.ErrNotConfirmed) {
		t.Fatalf("a round confirmed by a server outside the cluster: %v", err)
	}
}

// TestRoundListsStreamsAside: after the first read, the streams
// that exist are read beside the rounds — a read that hangs (the meta
// leader being elected) holds up no round — and a stream created since is
// required once read.
func TestRoundListsStreamsAside(t *testing.T) {
	_, nc, _ := jstest.Start(t, func() (*natsembed.Server, error) {
		return natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir()})
	})
	fakeNode(t, nc, protocol.SyncReply{Server: "a", UptimeNS: int64(time.Hour), Leads: []string{"S"}})
	var reads atomic.Int64
	release := make(chan struct{})
	existing := func() ([]string, error) {
		if reads.Add(1) == 1 {
			return []string{"S"}, nil
		}
		<-release // the second read hangs until released
		return []string{"S", "T"}, nil
	}
	r, err := durability.NewRounds(nc, nodeSyncSubject, clusterFuncs{func(bool) []string { return []string{"a"} }, existing}, durability.WithRoundTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	durability.ReadClusterEveryRound(r)
	done := make(chan error, 1)
	go func() {
		for range 3 { // the second read starts, and hangs, under these
			if err := r.Round(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a round while the streams' read hangs: %v", err)
		}
	case <-time.After(10 * time.Second): // a liveness bound, not a timing
		close(release)
		<-done
		t.Fatal("the rounds waited for the hanging read of the streams")
	}
	close(release)
	testkit.Eventually(t, 10*time.Second, func() bool {
		var u *durability.UnconfirmedError
		return errors.As(r.Round(), &u) && slices.Equal(u.Streams, []string{"T"})
	}, "a stream read since is required (T, which nobody leads)")
}

// TestNodeServedAtOnce: a server whose acks already mean on disk
// (sync-always: no group sync to join) answers at once, with the
// streams it leads, and a round counts it.
func TestNodeServedAtOnce(t *testing.T) {
	srv, nc, js := jstest.Start(t, func() (*natsembed.Server, error) {
		return natsembed.StartServer(natsembed.ServerConfig{StoreDir: t.TempDir()})
	})
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	s, err := durability.Serve(nc, nodeSyncSubject, "", nil, srv.NodeAnswer([]string{"S"}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	name := srv.NATS().Name()
	r, err := durability.NewRounds(nc, nodeSyncSubject, clusterFuncs{func(bool) []string { return []string{name} }, func() ([]string, error) { return []string{"S"}, nil }}, durability.WithRoundTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Round(); err != nil {
		t.Fatalf("a round answered by a sync-always server: %v", err)
	}
}

// clusterFuncs is a durability.Cluster of two functions.
type clusterFuncs struct {
	peers   func(withOffline bool) []string
	streams func() ([]string, error)
}

func (c clusterFuncs) Peers(withOffline bool) []string { return c.peers(withOffline) }
func (c clusterFuncs) Streams() ([]string, error)      { return c.streams() }

// TestNewRoundsRefusesBadOptions: a round timeout ≤ 0 and a missing
// cluster are protocol.ErrInvalidOption, before the connection is used.
func TestNewRoundsRefusesBadOptions(t *testing.T) {
	nc := new(nats.Conn) // never used: every case fails first
	cl := clusterFuncs{func(bool) []string { return nil }, func() ([]string, error) { return nil, nil }}
	for name, err := range map[string]error{
		"negative timeout": second(durability.NewRounds(nc, nodeSyncSubject, cl, durability.WithRoundTimeout(-time.Second))),
		"zero timeout":     second(durability.NewRounds(nc, nodeSyncSubject, cl, durability.WithRoundTimeout(0))),
		"nil cluster":      second(durability.NewRounds(nc, nodeSyncSubject, nil)),
	} {
		if !errors.Is(err, protocol.ErrInvalidOption) {
			t.Errorf("%s: %v, want errInvalidOption", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
