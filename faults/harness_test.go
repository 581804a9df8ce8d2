package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/sluice-dev/sluice/config"
	sluicefx "github.com/sluice-dev/sluice/fx"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/testkit"
)

// Options describe a harness: Servers nats-servers clustered on 127.0.0.1
// random ports, and one sluice node per server connected to it with
// --nats-url (node i to server i; the client learns the other servers from
// the cluster and fails over to them).
type Options struct {
	// Servers is the number of nats-servers (default 3).
	Servers int
	// ServerProcs runs each server as a process of its own (natsd): it can
	// then be killed with SIGKILL and frozen with SIGSTOP. Otherwise the
	// servers run in the test process (testkit.Cluster), where Kill is an
	// abrupt in-process shutdown.
	ServerProcs bool
	// NodeProcs runs each sluice node as a real cmd/edge process (SIGKILL,
	// SIGSTOP, SIGTERM). Otherwise the nodes are fx apps in the test
	// process, whose internals (Quota, NATS) the test can reach.
	NodeProcs bool
	// Embedded runs each node as a cmd/edge process that embeds its
	// nats-server, clustered with the others' (--nats-listen,
	// --cluster-listen, --routes): the single-binary cluster. Killing a
	// node kills its server too. Implies NodeProcs; ServerProcs is ignored.
	Embedded bool
	// Partitions of the fleet (default 8).
	Partitions int
	// Shards of the fleet (default 1; --partitions P/S): hooks and claims
	// in S streams and buckets. Partitions must be a multiple.
	Shards int
	// Replicas of every bucket and stream (default: min(3, Servers)).
	Replicas int
	// YAML is the edge configuration file (default baseYAML).
	YAML string
	// Args are extra edge flags.
	Args []string
	// Exclusive takes the one heavy slot even with fewer than 3 servers:
	// a scenario that saturates the cores on purpose (TestOverload) must
	// not bend the timings of the others.
	Exclusive bool
	// DataDir holds the nodes' data directories (node0, node1, ...;
	// default: the harness's temporary directory). The power-cut test puts
	// it on a lazyfs mount.
	DataDir string
	// Log receives the in-process nodes' logs (default: testkit.Log,
	// discarded, or stderr at debug level with SLUICE_TEST_LOG=1).
	Log *slog.Logger
}

// heavy bounds the clusters running at once: one, so that the timing of a
// scenario (failover times, budgets) is not bent by another scenario sharing
// the two cores.
var heavy = make(chan struct{}, 1)

// baseYAML accepts any tenant and source, with limits high enough that load
// tests are never rate limited.
const baseYAML = `allow_unknown: true
defaults:
  limits: {hooks: {rate: 1000000, burst: 1000000}, bytes: {rate: 1000000000000, burst: 1000000000000}}
`

// Harness is a running cluster: servers, nodes and the test's own
// connection to the servers.
type Harness struct {
	t     testing.TB
	o     Options
	dir   string
	edge  string // binary, with NodeProcs
	srv   servers
	nodes []*Node // appended to by AddNodes, under nmu
	nmu   sync.Mutex
	http  *http.Client

	connOnce sync.Once
	conn     *nats.Conn
}

// servers is a cluster of nats-servers.
type servers interface {
	n() int
	url(i int) string // stable across restarts
	kill(i int)
	restart(t testing.TB, i int)
	stop(i int) // SIGSTOP (process servers only)
	cont(i int)
}

// Start starts the servers, then the nodes, and waits until every node is
// ready and every partition is served. Everything stops in t.Cleanup.
func Start(t testing.TB, o Options) *Harness {
	t.Helper()
	if o.Servers == 0 {
		o.Servers = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 8
	}
	if o.Shards == 0 {
		o.Shards = 1
	}
	if o.Replicas == 0 {
		o.Replicas = min(3, o.Servers)
	}
	if o.YAML == "" {
		o.YAML = baseYAML
	}
	if o.Servers >= 3 || o.Exclusive {
		// At most heavyAtOnce clusters at a time: on two cores more would
		// only stretch every scenario's timings. Released last.
		heavy <- struct{}{}
		t.Cleanup(func() { <-heavy })
	}
	h := &Harness{t: t, o: o, dir: t.TempDir()}
	start := time.Now()
	h.http = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 30 * time.Second},
		Timeout:   20 * time.Second,
	}
	t.Cleanup(h.http.CloseIdleConnections)
	if o.Embedded {
		o.NodeProcs, o.ServerProcs = true, false
		h.o = o
	}
	var natsd string
	if o.NodeProcs || o.ServerProcs {
		h.edge, natsd = binaries(t)
		t.Logf("harness: binaries ready after %v", time.Since(start).Round(time.Millisecond))
	}
	switch {
	case o.Embedded:
		h.srv = newEmbeddedServers(t, h, o.Servers)
	case o.ServerProcs:
		h.srv = startProcServers(t, natsd, o.Servers)
	case o.Servers == 1:
		k := testkit.New(t, testkit.WithListener())
		h.srv = &singleServer{k: k}
	default:
		h.srv = &kitServers{k: testkit.Cluster(t, o.Servers)}
	}
	if err := os.WriteFile(filepath.Join(h.dir, "edge.yaml"), []byte(o.YAML), 0o600); err != nil {
		t.Fatal(err)
	}
	h.nodes = make([]*Node, o.Servers)
	dataDir := o.DataDir
	if dataDir == "" {
		dataDir = h.dir
	}
	for i := range h.nodes {
		h.nodes[i] = &Node{i: i, h: h, dir: filepath.Join(dataDir, "node"+strconv.Itoa(i))}
	}
	// Node 0 first: it creates the buckets and streams; the others then
	// start together and find them. (Three nodes creating the R3 buckets
	// of a fresh cluster at once used to fail now and then with 10059
	// "stream not found", fixed in ce949e3; the embedded mode below still
	// starts all three at once.)
	var wg sync.WaitGroup
	errs := make([]error, o.Servers)
	for i, n := range h.nodes {
		switch {
		case o.Embedded:
			// Together: R3 assets need all three peers. A node that fails
			// its start-up fails the test (rather than being started
			// again and only logged).
			wg.Go(func() { errs[i] = n.startProc() })
		case !o.NodeProcs:
			// In-process apps one by one (fxtest is driven from the test
			// goroutine).
			n.startInProc(t)
		case i == 0:
			if errs[0] = n.startProc(); errs[0] != nil {
				t.Fatal(errs[0])
			}
		default:
			wg.Go(func() { errs[i] = n.startProc() })
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// Nodes stop before the servers (cleanups run last-in first-out) and
	// never stay frozen.
	t.Cleanup(func() {
		for _, n := range h.nodes {
			if n.proc != nil {
				// kill -9, as every restarted incarnation already is at
				// cleanup: a graceful stop here proves nothing, and a
				// cluster's last nodes wait on their lost peers (1.8 s in
				// TestKillNode, 4 s in TestKillShardLeader).
				n.proc.kill()
				continue
			}
			n.shutdown()
		}
	})
	t.Logf("harness: %d servers, %d nodes up in %v", o.Servers, len(h.nodes), time.Since(start).Round(time.Millisecond))
	h.WaitServed(t, 30*time.Second, h.AllPartitions()...)
	return h
}

// Node is one sluice node.
type Node struct {
	i   int
	h   *Harness
	dir string

	mu     sync.Mutex
	url    string // HTTP base URL ("" while down)
	member string // quota member id of the current incarnation

	// process nodes
	proc  *proc
	procs []*proc // every incarnation
	// in-process nodes
	app   *fxtest.App
	NATS  *sluicefx.NATS
	HTTP  *sluicefx.HTTP
	Quota *sluicefx.Quota
}

func (n *Node) args() []string {
	o := n.h.o
	a := []string{
		"--config", filepath.Join(n.h.dir, "edge.yaml"),
		"--data-dir", n.dir,
		"--http-addr", "127.0.0.1:0",
		"--replicas", strconv.Itoa(o.Replicas),
		"--partitions", strconv.Itoa(o.Partitions) + "/" + strconv.Itoa(o.Shards),
	}
	if e, ok := n.h.srv.(*embeddedServers); ok {
		a = append(a, e.args[n.i]...)
	} else {
		a = append(a, "--nats-url", n.h.srv.url(n.i))
	}
	return append(a, o.Args...)
}

// startProc starts the node as a cmd/edge process and waits until it is
// ready.
func (n *Node) startProc() error {
	args := append(n.args(), "--log-format", "json", "--log-level", "info")
	p, err := startProc(n.h.t, fmt.Sprintf("edge%d", n.i), n.h.edge, nil, args...)
	if err != nil {
		return err
	}
	var listen, member string
	_, err = p.waitLine(60*time.Second, func(l string) bool {
		var rec struct {
			Msg    string `json:"msg"`
			URL    string `json:"url"`
			Member string `json:"member"`
		}
		if json.Unmarshal([]byte(l), &rec) != nil {
			return false
		}
		switch rec.Msg {
		case "quota worker started":
			member = rec.Member
		case "edge listening":
			listen = rec.URL
		}
		return listen != "" && member != ""
	})
	if err != nil {
		p.kill()
		return err
	}
	n.mu.Lock()
	n.proc, n.url, n.member = p, listen, member
	n.procs = append(n.procs, p)
	n.mu.Unlock()
	return n.waitReady(30 * time.Second)
}

// startInProc starts the node as an fx app in this process.
func (n *Node) startInProc(t testing.TB) {
	t.Helper()
	cfg, err := config.Parse(n.args(), nil, nil)
	if err != nil {
		t.Fatalf("node %d config: %v", n.i, err)
	}
	log := n.h.o.Log
	if log == nil {
		log = testkit.Log().With("node", n.i)
	}
	var nc *sluicefx.NATS
	var hs *sluicefx.HTTP
	var q *sluicefx.Quota
	app := fxtest.New(t, sluicefx.Options(context.Background(), cfg, log), fx.Populate(&nc, &hs, &q))
	app.RequireStart()
	n.mu.Lock()
	n.app, n.NATS, n.HTTP, n.Quota = app, nc, hs, q
	n.url = "http://" + *hs.Addr.Load()
	n.member = q.Worker.ID()
	n.mu.Unlock()
	if err := n.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func (n *Node) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		res, err := n.h.http.Get(n.URL() + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		if time.Now().After(deadline) {
			out := ""
			if n.proc != nil {
				out = n.proc.out.tail(30)
			}
			return fmt.Errorf("node %d not ready within %v: %v\n%s", n.i, timeout, err, out)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// URL is the node's HTTP base URL ("" while it is down).
func (n *Node) URL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.url
}

// Member is the quota member id of the node's current incarnation.
func (n *Node) Member() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.member
}

// Kill kills the node's process with SIGKILL: no lease is released, no
// claim settled, nothing flushed.
func (n *Node) Kill() {
	n.mustProc().kill()
	n.mu.Lock()
	n.url = ""
	n.mu.Unlock()
}

// Term stops the node's process with SIGTERM (a graceful stop: leases are
// handed over at once) and waits up to 15 s.
func (n *Node) Term() error {
	err := n.mustProc().term(15 * time.Second)
	n.mu.Lock()
	n.url = ""
	n.mu.Unlock()
	return err
}

// Freeze and Thaw send SIGSTOP and SIGCONT to the node's process.
func (n *Node) Freeze() { n.mustProc().stop() }
func (n *Node) Thaw()   { n.mustProc().cont() }

// Restart starts a killed or stopped node again on its data directory.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	if n.proc != nil {
		if n.proc.running() {
			t.Fatalf("node %d is running", n.i)
		}
		if err := n.startProc(); err != nil {
			t.Fatal(err)
		}
		return
	}
	n.startInProc(t)
}

// Stop stops an in-process node gracefully.
func (n *Node) Stop(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	app := n.app
	n.app, n.url = nil, ""
	n.mu.Unlock()
	if app != nil {
		app.RequireStop()
	}
}

func (n *Node) mustProc() *proc {
	if n.proc == nil {
		n.h.t.Fatalf("node %d is not a process", n.i)
	}
	return n.proc
}

func (n *Node) shutdown() {
	if n.proc != nil {
		if err := n.proc.term(15 * time.Second); err != nil && n.proc.running() {
			n.proc.kill()
		}
		return
	}
	n.mu.Lock()
	app := n.app
	n.app = nil
	n.mu.Unlock()
	if app != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			n.h.t.Logf("node %d stop: %v", n.i, err)
		}
	}
}

// Node returns node i.
func (h *Harness) Node(i int) *Node {
	h.nmu.Lock()
	defer h.nmu.Unlock()
	return h.nodes[i]
}

// Nodes returns the nodes.
func (h *Harness) Nodes() []*Node { return h.nodes }

// KillServer kills server i: SIGKILL for a process, an abrupt shutdown in
// process.
func (h *Harness) KillServer(i int) { h.srv.kill(i) }

// RestartServer starts server i again on its store directory and ports.
func (h *Harness) RestartServer(t testing.TB, i int) { h.srv.restart(t, i) }

// FreezeServer and ThawServer SIGSTOP and SIGCONT server i (ServerProcs).
func (h *Harness) FreezeServer(i int) { h.srv.stop(i) }
func (h *Harness) ThawServer(i int)   { h.srv.cont(i) }

// ServerURL is server i's client URL.
func (h *Harness) ServerURL(i int) string { return h.srv.url(i) }

// Conn is the test's own connection to the cluster (every server's URL,
// reconnecting forever), closed by t.Cleanup.
func (h *Harness) Conn() *nats.Conn {
	h.connOnce.Do(func() {
		urls := make([]string, h.srv.n())
		for i := range urls {
			urls[i] = h.srv.url(i)
		}
		nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
		if err != nil {
			h.t.Fatalf("connect to the cluster: %v", err)
		}
		h.conn = nc
		h.t.Cleanup(nc.Close)
	})
	return h.conn
}

// JS is JetStream over Conn.
func (h *Harness) JS() jetstream.JetStream {
	js, err := jetstream.New(h.Conn())
	if err != nil {
		h.t.Fatal(err)
	}
	return js
}

// AllPartitions is 0..P-1.
func (h *Harness) AllPartitions() []int {
	ps := make([]int, h.o.Partitions)
	for i := range ps {
		ps[i] = i
	}
	return ps
}

// Principal returns a name that maps to partition n (tenants and
// principals share the partition function).
func (h *Harness) Principal(stem string, n int) string {
	for i := 0; ; i++ {
		s := stem + "-" + strconv.Itoa(i)
		if quota.Partition(s, h.o.Partitions) == n {
			return s
		}
	}
}

// Request sends a request to a service subject (without the "sluice.v1."
// prefix) and returns the reply body and the micro error code ("" for
// none).
func (h *Harness) Request(ctx context.Context, subject string, body any) ([]byte, string, error) {
	var data []byte
	switch b := body.(type) {
	case []byte:
		data = b
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			return nil, "", err
		}
	}
	m, err := h.Conn().RequestWithContext(ctx, "sluice.v1."+subject, data)
	if err != nil {
		return nil, "", err
	}
	return m.Data, m.Header.Get(micro.ErrorCodeHeader), nil
}

// Served reports whether partition n answers a quota.count now.
func (h *Harness) Served(n int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, code, err := h.Request(ctx, "quota.count", map[string]string{"principal": h.Principal("probe", n), "key": "probe"})
	return err == nil && code == ""
}

// WaitServed waits until every partition of ps answers.
func (h *Harness) WaitServed(t testing.TB, timeout time.Duration, ps ...int) time.Duration {
	t.Helper()
	start := time.Now()
	left := append([]int(nil), ps...)
	for len(left) > 0 {
		var still []int
		for _, n := range left {
			if !h.Served(n) {
				still = append(still, n)
			}
		}
		left = still
		if len(left) == 0 {
			break
		}
		if time.Since(start) > timeout {
			t.Fatalf("partitions %v not served within %v", left, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Owner returns the node whose worker holds partition n's lease (-1: none
// or unknown).
func (h *Harness) Owner(n int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.JS().KeyValue(ctx, kvstore.BucketNames("sluice").Leases)
	if err != nil {
		return -1
	}
	e, err := kv.Get(ctx, "lease."+strconv.Itoa(n))
	if err != nil {
		return -1
	}
	var rec struct {
		Owner string `json:"owner"`
	}
	if json.Unmarshal(e.Value(), &rec) != nil {
		return -1
	}
	for _, nd := range h.nodes {
		if nd.Member() == rec.Owner {
			return nd.i
		}
	}
	return -1
}

// Stored reads the whole HOOKS stream. It first waits (bounded) until the
// stream has a leader and every replica is current: right after a server
// restart the stream's group may still be electing or catching up, and a
// consumer created then can be placed on a peer whose interest has not
// reached the test's server yet ("no responders"). The
// read itself is one ordered consumer iterated with Messages, which
// recreates its consumer on a lost heartbeat or no responders instead of
// failing the read.
func (h *Harness) Stored(t testing.TB) []StoredHook {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out []StoredHook
	for k := range h.o.Shards {
		name := protocol.HooksStream(k)
		info := h.waitStreamCurrent(t, ctx, name)
		st, err := h.JS().Stream(ctx, name)
		if err != nil {
			t.Fatalf("%s stream: %v", name, err)
		}
		for _, sh := range readStored(t, ctx, st, info.State.Msgs) {
			if got := protocol.Shard(sh.Tenant, h.o.Shards); got != k {
				t.Errorf("hook %s of tenant %q is in %s, its shard is %d", sh.ID, sh.Tenant, name, got)
			}
			out = append(out, sh)
		}
	}
	return out
}

// readStored reads the first n hooks of the HOOKS stream st.
func readStored(t testing.TB, ctx context.Context, st jetstream.Stream, n uint64) []StoredHook {
	t.Helper()
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("HOOKS consumer: %v", err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		t.Fatalf("HOOKS messages: %v", err)
	}
	defer msgs.Stop()
	out := make([]StoredHook, 0, n)
	for uint64(len(out)) < n {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			t.Fatalf("HOOKS: read %d of %d messages: %v", len(out), n, err)
		}
		hd := m.Headers()
		key := hd.Get("Sluice-Dedupe-Key")
		if hd.Get("Sluice-Dedupe-Key-Encoding") == "percent" {
			key, _ = url.PathUnescape(key)
		}
		md, _ := m.Metadata()
		var seq uint64
		if md != nil {
			seq = md.Sequence.Stream
		}
		out = append(out, StoredHook{ID: hd.Get("Sluice-Hook-Id"), HookKey: HookKey{hd.Get("Sluice-Tenant"), hd.Get("Sluice-Source"), key}, Seq: seq})
	}
	return out
}

// streamCurrent reports whether the stream has a leader and all its
// replicas (Options.Replicas - 1 followers) are online and current.
func (h *Harness) streamCurrent(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if h.o.Replicas <= 1 {
		return info, nil
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("stream %s has no leader", name)
	}
	if len(info.Cluster.Replicas) != h.o.Replicas-1 {
		return nil, fmt.Errorf("stream %s has %d followers, want %d", name, len(info.Cluster.Replicas), h.o.Replicas-1)
	}
	for _, r := range info.Cluster.Replicas {
		if !r.Current || r.Offline {
			return nil, fmt.Errorf("stream %s replica %s: current %v, offline %v", name, r.Name, r.Current, r.Offline)
		}
	}
	return info, nil
}

// waitStreamCurrent waits until streamCurrent holds for the stream, polling
// until ctx ends (then the test fails with the last reason).
func (h *Harness) waitStreamCurrent(t testing.TB, ctx context.Context, name string) *jetstream.StreamInfo {
	t.Helper()
	js := h.JS()
	for {
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := h.streamCurrent(ictx, js, name)
		icancel()
		if err == nil {
			return info
		}
		if ctx.Err() != nil {
			t.Fatalf("stream %s not current: %v", name, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// CheckHooks reads the stream, checks the ledger against it, logs the
// report and fails the test on violations. Split keys (more than one
// winner) are violations unless allowSplit.
func (h *Harness) CheckHooks(t testing.TB, l *Ledger, allowSplit bool) Report {
	t.Helper()
	return h.CheckStored(t, l, h.Stored(t), allowSplit)
}

// CheckStored is CheckHooks on hooks the test has read already (Stored).
func (h *Harness) CheckStored(t testing.TB, l *Ledger, stored []StoredHook, allowSplit bool) Report {
	t.Helper()
	r := l.Check(stored)
	t.Logf("hooks: %s; answers by status %v", r, l.Codes())
	for i, k := range r.Split {
		if i == 3 {
			break
		}
		t.Logf("split key %s: answers %v", k, l.Winners(k))
	}
	for _, v := range r.Violations(allowSplit) {
		t.Errorf("invariant broken: %s", v)
	}
	return r
}

// LogSummary logs how often each warning and error message appeared in
// the process nodes' logs (every incarnation).
func (h *Harness) LogSummary(t testing.TB) {
	t.Helper()
	for _, n := range h.nodes {
		for _, p := range n.procs {
			counts := map[string]int{}
			for _, l := range strings.Split(p.out.text(), "\n") {
				var rec struct {
					Level string `json:"level"`
					Msg   string `json:"msg"`
					Err   string `json:"error"`
				}
				if json.Unmarshal([]byte(l), &rec) != nil || (rec.Level != "WARN" && rec.Level != "ERROR") {
					continue
				}
				e := rec.Err
				if len(e) > 120 {
					e = e[:120] + "…"
				}
				counts[rec.Level+" "+rec.Msg+" "+e]++
			}
			for m, c := range counts {
				t.Logf("%s: %d × %s", p.name, c, m)
			}
		}
	}
}

// kitServers are in-process servers (testkit.Cluster).
type kitServers struct {
	k    *testkit.ClusterKit
	once sync.Once
	urls []string
}

func (s *kitServers) n() int { return s.k.N() }

func (s *kitServers) url(i int) string {
	s.once.Do(func() {
		for j := range s.k.N() {
			s.urls = append(s.urls, s.k.Server(j).ClientURL())
		}
	})
	return s.urls[i]
}

func (s *kitServers) kill(i int)                  { s.url(0); s.k.Kill(i) }
func (s *kitServers) restart(t testing.TB, i int) { s.k.Restart(t, i) }
func (s *kitServers) stop(int)                    { panic("faults: SIGSTOP needs Options.ServerProcs") }
func (s *kitServers) cont(int)                    {}

// singleServer is one in-process server without a cluster (R1).
type singleServer struct{ k *testkit.Kit }

func (s *singleServer) n() int                  { return 1 }
func (s *singleServer) url(int) string          { return s.k.Server.ClientURL() }
func (s *singleServer) kill(int)                { panic("faults: a single in-process server cannot be killed") }
func (s *singleServer) restart(testing.TB, int) {}
func (s *singleServer) stop(int)                { panic("faults: SIGSTOP needs Options.ServerProcs") }
func (s *singleServer) cont(int)                {}

// embeddedServers are the servers the Embedded nodes run.
type embeddedServers struct {
	h    *Harness
	args [][]string
	urls []string
}

func newEmbeddedServers(t testing.TB, h *Harness, n int) *embeddedServers {
	ports := testkit.FreePorts(t, 2*n)
	e := &embeddedServers{h: h}
	if n == 1 {
		// One node: the default single binary, its embedded server given a
		// loopback listener only so that the test can read HOOKS.
		port := ports[0]
		e.args = [][]string{{"--nats-listen", fmt.Sprintf("127.0.0.1:%d", port)}}
		e.urls = []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}
		return e
	}
	for i := range n {
		routes := routesOf(i, ports[n:], "nats-route://")
		e.args = append(e.args, []string{
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			"--routes", routes,
		})
		e.urls = append(e.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	return e
}

// routesOf lists server i's routes: every route port but its own, each
// as scheme+"127.0.0.1:port", comma-separated.
func routesOf(i int, routePorts []int, scheme string) string {
	var routes []string
	for j, p := range routePorts {
		if j != i {
			routes = append(routes, fmt.Sprintf("%s127.0.0.1:%d", scheme, p))
		}
	}
	return strings.Join(routes, ",")
}

// AddNodes starts k more embedded nodes, together, and waits until each
// is ready; nothing of the running nodes restarts. Their routes name every
// server, running and new: a fresh server expects a meta group of as many
// servers as it has routes, and new servers naming only the running ones
// (3) could elect a meta leader of their own (2 of 3) before they found
// the cluster's; two JetStream clusters answered the same subjects (a
// joining node's heartbeat put answered by two KV_sluice_leases streams
// at sequences 405 and 69). With every server named, k new ones need k >
// N/2 to do that: add at most as many nodes at once as there are.
func (h *Harness) AddNodes(t testing.TB, k int) {
	t.Helper()
	e, ok := h.srv.(*embeddedServers)
	if !ok || len(e.args) < 2 {
		t.Fatal("AddNodes: needs an embedded cluster")
	}
	ports := testkit.FreePorts(t, 2*k)
	var routes []string
	for _, args := range e.args {
		routes = append(routes, "nats-route://"+args[slices.Index(args, "--cluster-listen")+1])
	}
	for _, p := range ports[k:] {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	added := make([]*Node, k)
	for j := range added {
		e.args = append(e.args, []string{
			"--nats-listen", fmt.Sprintf("127.0.0.1:%d", ports[j]),
			"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[k+j]),
			"--routes", strings.Join(routes, ","),
		})
		e.urls = append(e.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[j]))
		added[j] = &Node{i: len(h.nodes) + j, h: h, dir: filepath.Join(h.dir, "node"+strconv.Itoa(len(h.nodes)+j))}
	}
	h.nmu.Lock()
	h.nodes = append(h.nodes, added...)
	h.nmu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, k)
	for j, n := range added {
		wg.Go(func() { errs[j] = n.startProc() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func (e *embeddedServers) n() int                      { return len(e.urls) }
func (e *embeddedServers) url(i int) string            { return e.urls[i] }
func (e *embeddedServers) kill(i int)                  { e.h.nodes[i].Kill() }
func (e *embeddedServers) restart(t testing.TB, i int) { e.h.nodes[i].Restart(t) }
func (e *embeddedServers) stop(i int)                  { e.h.nodes[i].Freeze() }
func (e *embeddedServers) cont(i int)                  { e.h.nodes[i].Thaw() }

// procServers are natsd processes.
type procServers struct {
	bin   string
	args  [][]string
	urls  []string
	mu    sync.Mutex
	procs []*proc
	t     testing.TB
}

func startProcServers(t testing.TB, bin string, n int) *procServers {
	t.Helper()
	ports := testkit.FreePorts(t, 2*n)
	s := &procServers{bin: bin, t: t, procs: make([]*proc, n)}
	// The cluster's name, as an operator writes it: in the servers'
	// nats-server configuration file.
	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "cluster { name: faults-%d }\n", ports[0]), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		routes := routesOf(i, ports[n:], "")
		s.args = append(s.args, []string{
			"-name", fmt.Sprintf("s%d", i),
			"-store", t.TempDir(),
			"-listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
			"-config", conf,
			"-cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
			"-routes", routes,
		})
		s.urls = append(s.urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = s.start(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	waitJetStream(t, s.urls)
	return s
}

func (s *procServers) start(i int) error {
	p, err := startProc(s.t, fmt.Sprintf("natsd%d", i), s.bin, nil, s.args[i]...)
	if err != nil {
		return err
	}
	if _, err := p.waitLine(30*time.Second, func(l string) bool { return strings.HasPrefix(l, "ready ") }); err != nil {
		p.kill()
		return err
	}
	s.mu.Lock()
	s.procs[i] = p
	s.mu.Unlock()
	return nil
}

func (s *procServers) n() int           { return len(s.urls) }
func (s *procServers) url(i int) string { return s.urls[i] }
func (s *procServers) proc(i int) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[i]
}
func (s *procServers) kill(i int) { s.proc(i).kill() }
func (s *procServers) stop(i int) { s.proc(i).stop() }
func (s *procServers) cont(i int) { s.proc(i).cont() }
func (s *procServers) restart(t testing.TB, i int) {
	t.Helper()
	if s.proc(i).running() {
		t.Fatalf("server %d is running", i)
	}
	if err := s.start(i); err != nil {
		t.Fatal(err)
	}
	waitJetStream(t, s.urls)
}

// waitJetStream waits until every reachable server answers JetStream API
// calls (a meta leader is known).
func waitJetStream(t testing.TB, urls []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, u := range urls {
		nc, err := nats.Connect(u, nats.Timeout(2*time.Second))
		if err != nil {
			continue // a killed server
		}
		err = testkit.WaitJetStream(ctx, nc)
		nc.Close()
		if err != nil {
			t.Fatalf("JetStream not ready on %s: %v", u, err)
		}
	}
}

// waitCurrent waits until every replica of every stream is current (a
// restarted server has caught up).
func (h *Harness) waitCurrent(t testing.TB, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	js := h.JS()
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		names := js.StreamNames(ctx)
		var list []string
		for n := range names.Name() {
			list = append(list, n)
		}
		last = names.Err()
		if last == nil && len(list) == 0 {
			last = errors.New("no streams listed")
		}
		for _, name := range list {
			if _, last = h.streamCurrent(ctx, js, name); last != nil {
				break
			}
		}
		cancel()
		if last == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("streams not current within %v: %v", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
