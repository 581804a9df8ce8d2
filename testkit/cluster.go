package testkit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
)

// ClusterKit is n embedded nats-servers with JetStream, clustered over
// routes on 127.0.0.1 random free ports. Server i keeps its name, store directory
// and ports across Kill(i)/Restart(i).
type ClusterKit struct {
	mu      sync.Mutex
	servers []*natsembed.Server // nil while killed
	cfgs    []natsembed.ServerConfig
	log     LogBuffer // the servers' own log, warnings and errors
}

// ClusterOption configures Cluster: every server's configuration.
type ClusterOption interface{ applyCluster(*natsembed.ServerConfig) }

type clusterOption func(*natsembed.ServerConfig)

func (o clusterOption) applyCluster(c *natsembed.ServerConfig) { o(c) }

// WithSyncAlways has every server fsync each JetStream write before acking
// it (natsembed.ServerConfig.SyncAlways; absent: off).
func WithSyncAlways(on bool) ClusterOption {
	return clusterOption(func(c *natsembed.ServerConfig) { c.SyncAlways = on })
}

// Cluster starts n (>= 1) clustered servers with JetStream, each with a
// client listener on a random loopback port, waits until JetStream has a
// meta leader, and stops everything in t.Cleanup. opts adjust every
// server's configuration (WithSyncAlways).
//
// The servers start one after another, each routing only to those already
// listening: started together, a server's early route dial made a duplicate
// route whose resolution could drop a live route for about a second, and
// with it a stream's interest on that server (writes found no responders).
func Cluster(t testing.TB, n int, opts ...ClusterOption) *ClusterKit {
	t.Helper()
	if n < 1 {
		t.Fatalf("testkit: cluster of %d servers", n)
	}
	c := &ClusterKit{servers: make([]*natsembed.Server, n), cfgs: make([]natsembed.ServerConfig, n)}
	name := fmt.Sprintf("tk-%p", c)
	// A JetStream cluster needs its routes configured at start, so the
	// route ports are picked (random free ports) before any server starts;
	// so are the client ports, which a restart comes back on (FreePorts
	// picks below the ephemeral range: no client's source port takes one
	// while its server is down).
	ports, clients := make([]string, n), make([]string, n)
	for i, p := range FreePorts(t, 2*n) {
		if i < n {
			ports[i] = fmt.Sprintf("127.0.0.1:%d", p)
		} else {
			clients[i-n] = fmt.Sprintf("127.0.0.1:%d", p)
		}
	}
	for i := range n {
		c.cfgs[i] = natsembed.ServerConfig{
			Name:          fmt.Sprintf("s%d", i),
			StoreDir:      t.TempDir(),
			Listen:        clients[i],
			ClusterName:   name,
			ClusterListen: ports[i],
			Logger:        slog.New(slog.NewTextHandler(&c.log, nil)).With("server", i),
		}
		for _, o := range opts {
			if o != nil {
				o.applyCluster(&c.cfgs[i])
			}
		}
	}
	// Registered after the TempDirs: cleanups run last-in first-out, so the
	// servers stop before their directories are removed.
	t.Cleanup(c.shutdown)
	for i := range n {
		// Routes to the servers already listening; the first server, which
		// needs one to start its JetStream cluster, routes to itself (the
		// server drops that route at once).
		c.cfgs[i].Routes = slices.Clone(ports[:max(i, 1)])
		c.start(t, i, "start")
	}
	// A restarted server routes to all the others.
	for i := range n {
		c.cfgs[i].Routes = slices.Delete(slices.Clone(ports), i, i+1)
	}
	c.WaitReady(t)
	return c
}

// ServerLog is what the servers have logged so far at warn level and
// above, one line each, tagged with the server's index.
func (c *ClusterKit) ServerLog() string { return c.log.String() }

// N is the number of servers.
func (c *ClusterKit) N() int { return len(c.cfgs) }

// Server returns server i (nil while killed).
func (c *ClusterKit) Server(i int) *natsembed.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Connect opens an in-process connection to server i, closed by t.Cleanup.
func (c *ClusterKit) Connect(t testing.TB, i int, opts ...nats.Option) *nats.Conn {
	t.Helper()
	srv := c.Server(i)
	if srv == nil {
		t.Fatalf("testkit: server %d is not running", i)
	}
	nc, err := srv.Connect(opts...)
	if err != nil {
		t.Fatalf("testkit: connect to server %d: %v", i, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream opens a connection to server i and returns its JetStream context.
func (c *ClusterKit) JetStream(t testing.TB, i int) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.Connect(t, i))
	if err != nil {
		t.Fatalf("testkit: jetstream on server %d: %v", i, err)
	}
	return js
}

// Bucket opens (creates) a KV bucket through server i.
func (c *ClusterKit) Bucket(t testing.TB, i int, cfg kvstore.BucketConfig) *kvstore.Bucket {
	t.Helper()
	b, err := kvstore.OpenBucket(Context(t), c.JetStream(t, i), cfg)
	if err != nil {
		t.Fatalf("testkit: bucket %s on server %d: %v", cfg.Name, i, err)
	}
	return b
}

// WaitReady waits until every running server answers JetStream API calls
// and the meta leader counts every running server as a current peer (so
// replicated streams can be placed at once).
func (c *ClusterKit) WaitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	running := 0
	for i := range c.cfgs {
		if c.Server(i) != nil {
			running++
		}
	}
	for {
		peers := 0
		for i := range c.cfgs {
			if srv := c.Server(i); srv != nil {
				peers = max(peers, len(srv.NATS().JetStreamClusterPeers()))
			}
		}
		if peers >= running {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testkit: JetStream meta group has %d of %d peers within 30s\n%s", peers, running, c.state())
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := range c.cfgs {
		srv := c.Server(i)
		if srv == nil {
			continue
		}
		nc, err := srv.Connect()
		if err != nil {
			t.Fatalf("testkit: connect to server %d: %v", i, err)
		}
		err = WaitJetStream(ctx, nc)
		nc.Close()
		if err != nil {
			t.Fatalf("testkit: JetStream not ready on server %d within 30s: %v\n%s", i, err, c.state())
		}
	}
}

// state says what each server sees of the cluster (its routes, the meta
// leader and the peers it knows) and ends with the tail of the servers'
// log: what a wait for the cluster that timed out waited for.
func (c *ClusterKit) state() string {
	var b strings.Builder
	for i := range c.cfgs {
		srv := c.Server(i)
		if srv == nil {
			fmt.Fprintf(&b, "server %d: not running\n", i)
			continue
		}
		ns := srv.NATS()
		leader := "none"
		if jsz, err := ns.Jsz(nil); err == nil && jsz.Meta != nil && jsz.Meta.Leader != "" {
			leader = jsz.Meta.Leader
		}
		fmt.Fprintf(&b, "server %d (%s): %d routes, meta leader %s, peers known %d, JetStream leader itself %v\n",
			i, ns.Name(), ns.NumRoutes(), leader, len(ns.JetStreamClusterPeers()), ns.JetStreamIsLeader())
	}
	lines := strings.Split(strings.TrimRight(c.log.String(), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	fmt.Fprintf(&b, "the servers' log (warn and above), last lines:\n    %s\n", strings.Join(lines, "\n    "))
	return b.String()
}

// Kill stops server i abruptly (its clients are disconnected; its store
// directory is kept).
func (c *ClusterKit) Kill(i int) {
	c.mu.Lock()
	srv := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
	}
}

// Restart starts server i again on its store directory and ports and waits
// until the cluster is ready.
func (c *ClusterKit) Restart(t testing.TB, i int) {
	t.Helper()
	c.mu.Lock()
	running := c.servers[i] != nil
	c.mu.Unlock()
	if running {
		t.Fatalf("testkit: server %d is running", i)
	}
	c.start(t, i, "restart")
	c.WaitReady(t)
}

// start starts server i on its configuration; what ("start", "restart")
// names the step in the error.
func (c *ClusterKit) start(t testing.TB, i int, what string) *natsembed.Server {
	t.Helper()
	srv, err := natsembed.StartServer(c.cfgs[i])
	if err != nil {
		t.Fatalf("testkit: %s server %d: %v", what, i, err)
	}
	c.mu.Lock()
	c.servers[i] = srv
	c.mu.Unlock()
	return srv
}

func (c *ClusterKit) shutdown() {
	for i := range c.cfgs {
		c.Kill(i)
	}
}
