package main

// The scale rows (issue 32, item 4): N real sluice nodes — the cmd/edge
// binary, one process each, their embedded nats-servers routed into one
// cluster — each under a CPU quota of its own (a cgroup per node), driven
// by a closed-loop HTTP load generator (this process, outside the quotas).
// Each row is a fresh fleet: new data dirs, new cluster.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/cmd/sluice-bench/internal/procstat"
	"github.com/sluice-dev/sluice/protocol"
)

// scaleSpec is one row of the scale matrix: nodes, replicas of every
// bucket and stream, each node's CPU quota in cores (0: no quota), and the
// nodes' --durability ("": --scale-durability, else the edge's default)
// and shards (--partitions P/S; 0 or 1: none). ToLeader sends each
// tenant's hooks to the node beside its shard's hooks-stream leader instead
// of round-robin: the ceiling of handing a hook whole to that node.
type scaleSpec struct {
	Nodes      int
	Replicas   int
	Quota      float64
	Durability string
	Shards     int
	ToLeader   bool
}

func (s scaleSpec) String() string {
	out := fmt.Sprintf("%d/%d/%s", s.Nodes, s.Replicas, trimFloat(s.Quota))
	if s.Durability != "" {
		out += "/" + s.Durability
	}
	if s.Shards > 1 {
		out += "/s" + strconv.Itoa(s.Shards)
	}
	if s.ToLeader {
		out += "/leader"
	}
	return out
}

// partitions is the --partitions of a row's nodes: the edge's default of
// 64 partitions, rounded up to a multiple of the shards (66 for 3).
func (s scaleSpec) partitions() string {
	if s.Shards <= 1 {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.partitionCount(), s.Shards)
}

// partitionCount is P of partitions() (with shards).
func (s scaleSpec) partitionCount() int { return (64 + s.Shards - 1) / s.Shards * s.Shards }

// defaultScaleRows are issue 32's rows: 1, 3 and 6 nodes at R1 and R3,
// at 0.4 core per node (at 6 nodes that is more than this 2-core machine
// has: 0.25 core instead) and at 0.25 core.
const defaultScaleRows = "1/1/0.4,3/1/0.4,3/3/0.4,1/1/0.25,3/1/0.25,3/3/0.25,6/1/0.25,6/3/0.25"

// parseScaleRows parses "N/R/quota[/durability][/sS][/leader],…" (quota
// in cores per node; 0 runs the row without a quota; sS: S shards; leader:
// each tenant's hooks sent to the node beside its shard's leader).
func parseScaleRows(s string) ([]scaleSpec, error) {
	var out []scaleSpec
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f := strings.Split(item, "/")
		durability, shards, toLeader := "", 0, false
		for len(f) > 3 {
			last := f[len(f)-1]
			f = f[:len(f)-1]
			if last == "leader" {
				if toLeader {
					return nil, fmt.Errorf("--scale-rows: %q: leader twice", item)
				}
				toLeader = true
				continue
			}
			if k, ok := strings.CutPrefix(last, "s"); ok && shards == 0 {
				n, err := strconv.Atoi(k)
				if err != nil || n < 1 || n > 16 {
					return nil, fmt.Errorf("--scale-rows: %q: shards must be s1..s16", item)
				}
				shards = n
				continue
			}
			if last == "" || durability != "" {
				return nil, fmt.Errorf("--scale-rows: %q: want nodes/replicas/quota[/durability][/sN][/leader]", item)
			}
			durability = last
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("--scale-rows: %q is not nodes/replicas/quota (e.g. 3/3/0.4)", item)
		}
		n, err1 := strconv.Atoi(f[0])
		r, err2 := strconv.Atoi(strings.TrimPrefix(strings.ToUpper(f[1]), "R"))
		q, err3 := strconv.ParseFloat(f[2], 64)
		switch {
		case err1 != nil || err2 != nil || err3 != nil:
			return nil, fmt.Errorf("--scale-rows: %q is not nodes/replicas/quota (e.g. 3/3/0.4)", item)
		case n < 1 || n > 16:
			return nil, fmt.Errorf("--scale-rows: %q: nodes must be 1..16", item)
		case r < 1 || r > 5 || r > n:
			return nil, fmt.Errorf("--scale-rows: %q: replicas must be 1..5 and at most the nodes", item)
		case q < 0 || q > 64:
			return nil, fmt.Errorf("--scale-rows: %q: quota must be 0 (none) or cores > 0", item)
		}
		if toLeader && n < 2 {
			return nil, fmt.Errorf("--scale-rows: %q: leader needs 2 or more nodes", item)
		}
		out = append(out, scaleSpec{Nodes: n, Replicas: r, Quota: q, Durability: durability, Shards: shards, ToLeader: toLeader})
	}
	if len(out) == 0 {
		return nil, errors.New("--scale-rows: no rows")
	}
	return out, nil
}

// scaleBody is a JSON body of n bytes.
func scaleBody(n int) []byte {
	head, tail := []byte(`{"event":"bench","pad":"`), []byte(`"}`)
	pad := max(0, n-len(head)-len(tail))
	b := append([]byte{}, head...)
	b = append(b, bytes.Repeat([]byte("x"), pad)...)
	return append(b, tail...)
}

// scaleRow is one measured row.
type scaleRow struct {
	Run        int     `json:"run"`
	Nodes      int     `json:"nodes"`
	Replicas   int     `json:"replicas"`
	QuotaCores float64 `json:"quota_cores_per_node"` // 0: none
	Shards     int     `json:"shards,omitempty"`     // --partitions P/S: S (0: none)
	// Leaders are the servers leading each shard's hooks stream and
	// claims bucket, as the streams' info says after the row ("hooks k:
	// server, claims k: server").
	Leaders    []string `json:"leaders,omitempty"`
	Cgroup     string   `json:"cgroup,omitempty"`     // v1 | v2
	Durability string   `json:"durability,omitempty"` // in force, as /readyz says
	Workers    int      `json:"workers"`
	ReadySec   float64  `json:"ready_s,omitempty"` // from the first start to every node ready

	// The measured window: hooks answered 202 (stored), 200 (duplicate:
	// none expected, every key is fresh) and anything else (non-2xx or no
	// answer).
	Seconds     float64 `json:"seconds,omitempty"`
	Hooks       uint64  `json:"hooks"`
	HooksPerSec float64 `json:"hooks_per_sec"`
	Duplicates  uint64  `json:"duplicates,omitempty"`
	Non2xx      uint64  `json:"non_2xx"`
	P50Us       float64 `json:"p50_us,omitempty"`
	P99Us       float64 `json:"p99_us,omitempty"`
	FirstError  string  `json:"first_error,omitempty"`

	// Ratios of hooks/s (0: no base row in this run).
	VsOneNode    float64 `json:"vs_one_node,omitempty"`    // the 1-node row of the same quota
	VsThreeNodes float64 `json:"vs_three_nodes,omitempty"` // the 3-node row of the same replicas and quota

	// CPU in the window, from /proc: the nodes' own (utime+stime of each
	// process), the load generator's (this process), the machine's.
	FleetCPUSec       float64   `json:"fleet_cpu_s"`
	FleetCPUPerHookUs float64   `json:"fleet_cpu_per_hook_us"`
	NodeCPUShare      []float64 `json:"node_cpu_share"`           // of the fleet's
	NodeQuotaUse      []float64 `json:"node_quota_use,omitempty"` // CPU time / (quota × window)
	LoadGenCores      float64   `json:"loadgen_cores"`
	OtherCores        float64   `json:"other_cores"` // host busy − fleet − load generator
	HostIdle          float64   `json:"host_idle"`   // idle + iowait share of /proc/stat
	HostSaturated     bool      `json:"host_saturated,omitempty"`

	// The check at the end of the row, over the whole row (warm-up and
	// tail included): every 202 must be a message of the HOOKS stream.
	Answered202      uint64            `json:"answered_202_whole_row"`
	StatusCounts     map[string]uint64 `json:"status_counts_whole_row,omitempty"` // "0": no answer
	StreamMsgs       uint64            `json:"hooks_stream_msgs"`
	Lost             uint64            `json:"lost,omitempty"`               // 202 but not in the stream
	StoredWithout2xx uint64            `json:"stored_without_2xx,omitempty"` // in the stream, no 202 seen (e.g. a timed-out request)

	Profiles []string `json:"profiles,omitempty"`
	// Account is the nodes' profiles split by component (account.go).
	Account *cpuProfileAccount `json:"account,omitempty"`
	Error   string             `json:"error,omitempty"`
}

// counts says whether a row takes part in the ratios.
func (r *scaleRow) counts() bool { return r.Error == "" && !r.HostSaturated && r.Hooks > 0 }

// saturatedIdle is the host idle share below which a row does not count:
// the machine itself, not the nodes' quotas, bounded it.
const saturatedIdle = 0.10

// scaleNode is one node of a fleet.
type scaleNode struct {
	idx                             int
	dir                             string
	httpAddr, natsAddr, clusterAddr string
	pprofAddr                       string
	proc                            *child
	cg                              *cgroup
	cpu0, cpu1                      time.Duration
}

// scaleNodeArgs is the command line of node n of a fleet: the one place
// that knows the edge's cluster flags (they are to move toward a
// nats-server config file: change them here). A single node runs
// standalone, as a one-node deployment does.
func scaleNodeArgs(n *scaleNode, fleet []*scaleNode, spec scaleSpec, cfg string) []string {
	args := []string{
		"--config", cfg,
		"--data-dir", filepath.Join(n.dir, "data"),
		"--http-addr", n.httpAddr,
		"--nats-listen", n.natsAddr,
		"--replicas", strconv.Itoa(spec.Replicas),
		"--log-level", "warn",
	}
	if len(fleet) > 1 {
		routes := make([]string, len(fleet))
		for i, o := range fleet {
			routes[i] = "nats-route://" + o.clusterAddr
		}
		args = append(args,
			"--cluster-listen", n.clusterAddr,
			"--routes", strings.Join(routes, ","))
	}
	if spec.Durability != "" {
		args = append(args, "--durability", spec.Durability)
	}
	if p := spec.partitions(); p != "" {
		args = append(args, "--partitions", p)
	}
	return args
}

// fleet is the nodes of one row and what they were given.
type fleet struct {
	nodes []*scaleNode
	nc    *nats.Conn
}

// stop ends every node (SIGTERM, SIGKILL after the grace), then removes
// their cgroups and data dirs. Safe on a partly started fleet and twice.
func (f *fleet) stop() error {
	if f.nc != nil {
		f.nc.Close()
		f.nc = nil
	}
	var wg sync.WaitGroup
	for _, n := range f.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.proc.stop(15 * time.Second)
		}()
	}
	wg.Wait()
	var errs []error
	for _, n := range f.nodes {
		if err := n.cg.remove(); err != nil {
			errs = append(errs, err)
		}
		n.cg = nil
		if err := os.RemoveAll(n.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// scale runs every scale row o.repeat times.
func (b *bench) scale(ctx context.Context) ([]scaleRow, error) {
	o := b.o
	var cgs *cpuCgroups
	if needsQuota(o.scaleRows) {
		var err error
		if cgs, err = findCPUCgroups(); err != nil {
			return nil, err
		}
		b.logf("scale: CPU quotas through cgroup v%d at %s", cgs.version, cgs.root)
	}
	bin, err := b.edgeBinary(ctx)
	if err != nil {
		return nil, err
	}
	var rows []scaleRow
	for run := 1; run <= o.repeat; run++ {
		for i, spec := range o.scaleRows {
			if spec.Durability == "" {
				spec.Durability = o.scaleDurability
			}
			r := b.scaleRow(ctx, run, i, spec, bin, cgs)
			rows = append(rows, r)
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
		}
	}
	scaleRatios(rows)
	return rows, nil
}

func needsQuota(specs []scaleSpec) bool {
	for _, s := range specs {
		if s.Quota > 0 {
			return true
		}
	}
	return false
}

// scaleRow starts a fleet for spec, loads it, checks the stream and stops
// it (whatever happened).
func (b *bench) scaleRow(ctx context.Context, run, idx int, spec scaleSpec, bin string, cgs *cpuCgroups) scaleRow {
	o := b.o
	r := scaleRow{Run: run, Nodes: spec.Nodes, Replicas: spec.Replicas, QuotaCores: spec.Quota, Shards: spec.Shards, Workers: o.scaleWorkers * spec.Nodes}
	if cgs != nil && spec.Quota > 0 {
		r.Cgroup = "v" + strconv.Itoa(cgs.version)
	}
	name := fmt.Sprintf("run%d-row%d-%dn-r%d-s%d", run, idx, spec.Nodes, spec.Replicas, max(spec.Shards, 1))
	b.logf("scale %s: %d nodes, R%d, quota %s, %d shards", name, spec.Nodes, spec.Replicas, quotaText(spec.Quota), max(spec.Shards, 1))
	f := &fleet{}
	defer func() {
		if err := f.stop(); err != nil && r.Error == "" {
			r.Error = err.Error()
		}
	}()
	var err error
	if r.Durability, r.ReadySec, err = b.startFleet(ctx, f, name, spec, bin, cgs, b.o.scaleProfile != ""); err != nil {
		r.Error = err.Error()
		b.logf("scale %s: %v", name, err)
		return r
	}
	if err := b.loadFleet(ctx, f, name, spec, &r); err != nil {
		r.Error = err.Error()
	}
	b.logf("scale %s: %.0f hooks/s, %d non-2xx, fleet CPU %.0f µs/hook, host idle %.0f%%, stream %d of %d answered 202%s",
		name, r.HooksPerSec, r.Non2xx, r.FleetCPUPerHookUs, 100*r.HostIdle, r.StreamMsgs, r.Answered202, errSuffix(r.Error))
	return r
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func quotaText(q float64) string {
	if q == 0 {
		return "none"
	}
	return trimFloat(q) + " core"
}

// startFleet starts spec.Nodes nodes, each in its cgroup (cgs nil or a
// quota of 0: none) and with a pprof listener if pprof, and waits until
// every one is ready. It returns the durability level in force and the
// time to ready.
func (b *bench) startFleet(ctx context.Context, f *fleet, name string, spec scaleSpec, bin string, cgs *cpuCgroups, pprof bool) (durability string, readySec float64, err error) {
	base := filepath.Join(b.tmp, "scale", name)
	for i := range spec.Nodes {
		n := &scaleNode{idx: i, dir: filepath.Join(base, fmt.Sprintf("node%d", i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return "", 0, err
		}
		for _, a := range []*string{&n.httpAddr, &n.natsAddr, &n.clusterAddr} {
			p, err := freePort()
			if err != nil {
				return "", 0, err
			}
			*a = "127.0.0.1:" + strconv.Itoa(p)
		}
		if pprof {
			p, err := freePort()
			if err != nil {
				return "", 0, err
			}
			n.pprofAddr = "127.0.0.1:" + strconv.Itoa(p)
		}
		f.nodes = append(f.nodes, n)
	}
	t0 := time.Now()
	for _, n := range f.nodes {
		cfg := filepath.Join(n.dir, "edge.yaml")
		if err := os.WriteFile(cfg, []byte(edgeConfigYAML), 0o600); err != nil {
			return "", 0, err
		}
		if cgs != nil && spec.Quota > 0 {
			g, err := cgs.create(fmt.Sprintf("%s%d-%s-node%d", cgroupPrefix, os.Getpid(), name, n.idx), spec.Quota)
			if err != nil {
				return "", 0, err
			}
			n.cg = g
		}
		env := cleanEnv()
		if n.pprofAddr != "" {
			env = append(env, "SLUICE_PPROF_ADDR="+n.pprofAddr)
		}
		c, err := startChild(fmt.Sprintf("node%d", n.idx), bin, scaleNodeArgs(n, f.nodes, spec, cfg), env)
		if err != nil {
			return "", 0, err
		}
		n.proc = c
		// From its first instructions on the node is under its quota
		// (the few before this write are not worth a wrapper).
		if n.cg != nil {
			if err := n.cg.add(c.pid()); err != nil {
				return "", 0, err
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for _, n := range f.nodes {
		d, err := waitReady(rctx, n.proc, "http://"+n.httpAddr+"/readyz")
		if err != nil {
			return "", 0, err
		}
		if durability == "" {
			durability = d
		} else if d != durability {
			durability += "/" + d
		}
	}
	readySec = time.Since(t0).Seconds()
	nc, err := nats.Connect("nats://"+f.nodes[0].natsAddr, nats.Name("sluice-bench-scale"), nats.MaxReconnects(-1))
	if err != nil {
		return "", 0, fmt.Errorf("connect to node0's NATS: %w", err)
	}
	f.nc = nc
	b.logf("scale %s: ready in %.1f s (durability %s)", name, readySec, durability)
	return durability, readySec, nil
}

// waitReady polls a node's /readyz until 200 and returns the durability
// level it says is in force.
func waitReady(ctx context.Context, c *child, url string) (string, error) {
	if err := c.waitHTTP(ctx, url); err != nil {
		return "", err
	}
	res, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	var body struct {
		Durability string `json:"durability"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return "", fmt.Errorf("%s: %w", url, err)
	}
	return body.Durability, nil
}

// hooksStreamMsgs is the message count of the hooks streams of every
// shard (HOOKS, HOOKS_1, …), asked of the cluster (their leaders answer).
func hooksStreamMsgs(ctx context.Context, nc *nats.Conn, shards int) (uint64, error) {
	var sum uint64
	for k := range max(shards, 1) {
		n, err := streamMsgs(ctx, nc, protocol.HooksStream(k))
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}

// shardLeaders names the leader of each shard's hooks stream and claims
// bucket.
func shardLeaders(ctx context.Context, nc *nats.Conn, shards int) []string {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil
	}
	var out []string
	for k := range max(shards, 1) {
		for kind, name := range map[string]string{"hooks": protocol.HooksStream(k), "claims": "KV_" + protocol.ClaimsBucket(protocol.DefaultPrefix, k)} {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			leader := "?"
			if st, err := js.Stream(ictx, name); err == nil && st.CachedInfo().Cluster != nil {
				leader = st.CachedInfo().Cluster.Leader
			}
			cancel()
			out = append(out, fmt.Sprintf("%s %d: %s", kind, k, leader))
		}
	}
	slices.Sort(out)
	return out
}

// leaderNodes is, for each tenant, the index of the node whose server leads
// the tenant's shard's hooks stream (ToLeader rows).
func leaderNodes(ctx context.Context, f *fleet, shards int, tenants []string) ([]int, error) {
	byServer := map[string]int{}
	for i, n := range f.nodes {
		nc, err := nats.Connect("nats://" + n.natsAddr)
		if err != nil {
			return nil, fmt.Errorf("node%d: %w", n.idx, err)
		}
		byServer[nc.ConnectedServerName()] = i
		nc.Close()
	}
	js, err := jetstream.New(f.nc)
	if err != nil {
		return nil, err
	}
	shardNode := make([]int, max(shards, 1))
	for k := range shardNode {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := js.Stream(ictx, protocol.HooksStream(k))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", protocol.HooksStream(k), err)
		}
		c := st.CachedInfo().Cluster
		i, ok := 0, false
		if c != nil {
			i, ok = byServer[c.Leader]
		}
		if !ok {
			return nil, fmt.Errorf("%s: leader %v is no node of the fleet", protocol.HooksStream(k), c)
		}
		shardNode[k] = i
	}
	pin := make([]int, len(tenants))
	for j, t := range tenants {
		pin[j] = shardNode[protocol.Shard(t, max(shards, 1))]
	}
	return pin, nil
}

// streamMsgs is one stream's message count.
func streamMsgs(ctx context.Context, nc *nats.Conn, stream string) (uint64, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	var last error
	// A leader elected a moment ago, or one busy under its quota, may miss
	// a request's deadline: ask a few times.
	for range 5 {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := js.Stream(ictx, stream)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = s.Info(ictx); err == nil {
				cancel()
				return info.State.Msgs, nil
			}
		}
		cancel()
		last = err
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	return 0, fmt.Errorf("%s stream info: %w", stream, last)
}

// statusCounts counts HTTP answers by status over a whole row (0: no
// answer).
type statusCounts [600]atomic.Uint64

func (s *statusCounts) add(code int) {
	if code < 0 || code >= len(s) {
		code = 0
	}
	s[code].Add(1)
}

func (s *statusCounts) nonZero() map[string]uint64 {
	out := map[string]uint64{}
	for code := range s {
		if n := s[code].Load(); n > 0 {
			out[strconv.Itoa(code)] = n
		}
	}
	return out
}

// scaleHookOp POSTs one hook for tenant seq % tenants to node seq %
// len(bases) (or, with pin, to node pin[tenant]), with a fresh
// Idempotency-Key, and counts its answer in counts.
func scaleHookOp(client *http.Client, bases []string, pin []int, tenants int, body []byte, keyPrefix string, counts *statusCounts, errs *firstError) opFunc {
	urls := make([][]string, len(bases))
	names := tenantNames(tenants)
	for i, base := range bases {
		urls[i] = make([]string, tenants)
		for j, n := range names {
			urls[i][j] = base + "/v1/hooks/" + n + "/bench"
		}
	}
	return func(ctx context.Context, seq uint64) outcome {
		node, tenant := int(seq%uint64(len(bases))), int(seq%uint64(tenants))
		if pin != nil {
			node = pin[tenant]
		}
		url := urls[node][tenant]
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			counts.add(0)
			errs.set(err)
			return outError
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", keyPrefix+strconv.FormatUint(seq, 36))
		res, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				counts.add(0)
				errs.set(err)
			}
			return outError
		}
		counts.add(res.StatusCode)
		switch res.StatusCode {
		case http.StatusAccepted, http.StatusOK:
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return outDuplicate
			}
			return outOK
		}
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 300))
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		errs.set(fmt.Errorf("POST %s: %s: %s", req.URL.Path, res.Status, bytes.TrimSpace(msg)))
		return outError
	}
}

// loadFleet drives the fleet for the warm-up and the window, samples CPU
// at the window's edges, and checks the stream afterwards.
func (b *bench) loadFleet(ctx context.Context, f *fleet, name string, spec scaleSpec, r *scaleRow) error {
	o := b.o
	before, err := hooksStreamMsgs(ctx, f.nc, spec.Shards)
	if err != nil {
		return err
	}
	bases := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		bases[i] = "http://" + n.httpAddr
	}
	client := httpClient(r.Workers)
	defer client.CloseIdleConnections()
	var counts statusCounts
	errs := &firstError{}
	var pin []int
	if spec.ToLeader {
		if pin, err = leaderNodes(ctx, f, spec.Shards, tenantNames(o.scaleTenants)); err != nil {
			return err
		}
	}
	op := scaleHookOp(client, bases, pin, o.scaleTenants, scaleBody(o.scaleBody), keyPrefix(), &counts, errs)

	var self0, self1 time.Duration
	var host0, host1 procstat.HostCPU
	var cpuErr error
	sample := func(at func(n *scaleNode) *time.Duration, self *time.Duration, host *procstat.HostCPU) {
		for _, n := range f.nodes {
			d, err := procstat.CPUTime(n.proc.pid())
			if err != nil && cpuErr == nil {
				cpuErr = fmt.Errorf("node%d: %w", n.idx, err)
			}
			*at(n) = d
		}
		*self, _ = procstat.CPUTime(b.self)
		h, err := procstat.ReadHostCPU()
		if err != nil && cpuErr == nil {
			cpuErr = err
		}
		*host = h
	}
	var profWG sync.WaitGroup
	profErrs := make([]error, len(f.nodes))
	var profFiles []string
	if o.scaleProfile != "" {
		if err := os.MkdirAll(o.scaleProfile, 0o755); err != nil {
			return err
		}
	}
	var seq atomic.Uint64
	res := runLoad(ctx, r.Workers, o.warmup, o.duration, &seq, op, window{
		start: func() {
			if o.scaleProfile != "" {
				secs := max(1, int(o.duration/time.Second))
				for i, n := range f.nodes {
					file := filepath.Join(o.scaleProfile, fmt.Sprintf("%s-node%d.pprof", name, n.idx))
					profFiles = append(profFiles, file)
					profWG.Add(1)
					go func() {
						defer profWG.Done()
						profErrs[i] = fetchProfile(ctx, n.pprofAddr, secs, file)
					}()
				}
			}
			sample(func(n *scaleNode) *time.Duration { return &n.cpu0 }, &self0, &host0)
		},
		end: func() {
			sample(func(n *scaleNode) *time.Duration { return &n.cpu1 }, &self1, &host1)
		},
	}, errs.String)
	profWG.Wait()
	client.CloseIdleConnections()

	r.Seconds = res.Elapsed.Seconds()
	r.Hooks = res.Outcomes[outOK]
	r.Duplicates = res.Outcomes[outDuplicate]
	r.Non2xx = res.Ops - r.Hooks - r.Duplicates
	if res.Elapsed > 0 {
		r.HooksPerSec = float64(r.Hooks) / res.Elapsed.Seconds()
	}
	r.P50Us, r.P99Us = us(res.Hist.quantile(0.5)), us(res.Hist.quantile(0.99))
	r.FirstError = res.FirstErr
	var nodeCPU []time.Duration
	for _, n := range f.nodes {
		nodeCPU = append(nodeCPU, n.cpu1-n.cpu0)
	}
	acct := fleetCPU(nodeCPU, r.Hooks, spec.Quota, res.Elapsed)
	r.FleetCPUSec, r.FleetCPUPerHookUs, r.NodeCPUShare, r.NodeQuotaUse = acct.total.Seconds(), acct.perHookUs, acct.shares, acct.quotaUse
	if res.Elapsed > 0 {
		r.LoadGenCores = (self1 - self0).Seconds() / res.Elapsed.Seconds()
		r.OtherCores = (host1.Busy(host0) - acct.total - (self1 - self0)).Seconds() / res.Elapsed.Seconds()
	}
	r.HostIdle = host1.IdleShare(host0)
	r.HostSaturated = r.HostIdle >= 0 && r.HostIdle < saturatedIdle

	// Every request has returned (runLoad waited for its workers): what
	// was answered 202 must be in the stream.
	r.StatusCounts = counts.nonZero()
	r.Answered202 = counts[http.StatusAccepted].Load()
	after, err := hooksStreamMsgs(ctx, f.nc, spec.Shards)
	if err != nil {
		return err
	}
	r.StreamMsgs = after - before
	r.Leaders = shardLeaders(ctx, f.nc, spec.Shards)
	if r.StreamMsgs < r.Answered202 {
		r.Lost = r.Answered202 - r.StreamMsgs
	} else {
		r.StoredWithout2xx = r.StreamMsgs - r.Answered202
	}
	if o.scaleProfile != "" {
		for i, file := range profFiles {
			if profErrs[i] != nil {
				b.logf("scale %s: profile of node%d: %v", name, i, profErrs[i])
				continue
			}
			r.Profiles = append(r.Profiles, file)
		}
		if len(r.Profiles) > 0 {
			if err := mergedTop(ctx, r.Profiles, filepath.Join(o.scaleProfile, name)); err != nil {
				b.logf("scale %s: pprof: %v", name, err)
			}
			if len(r.Profiles) == len(f.nodes) {
				a, err := accountProfiles(r.Profiles, r.Hooks)
				if err != nil {
					b.logf("scale %s: account: %v", name, err)
				} else {
					r.Account = &a
				}
			}
		}
	}
	switch {
	case cpuErr != nil:
		return cpuErr
	case r.Lost > 0:
		return fmt.Errorf("%d hooks answered 202 are not in the HOOKS stream (%d answered, %d in the stream)", r.Lost, r.Answered202, r.StreamMsgs)
	case r.Hooks == 0:
		return fmt.Errorf("no hook answered 202 in the window (first error: %s)", res.FirstErr)
	}
	return nil
}

// cpuAccount is a fleet's CPU over a window.
type cpuAccount struct {
	total     time.Duration
	perHookUs float64
	shares    []float64 // each node's share of the fleet's CPU
	quotaUse  []float64 // each node's CPU over its quota's time (nil: no quota)
}

// fleetCPU sums the nodes' CPU times over a window of elapsed in which the
// fleet stored hooks, with quota cores per node (0: none).
func fleetCPU(nodes []time.Duration, hooks uint64, quota float64, elapsed time.Duration) cpuAccount {
	var a cpuAccount
	for _, d := range nodes {
		a.total += d
	}
	if hooks > 0 {
		a.perHookUs = us(a.total) / float64(hooks)
	}
	for _, d := range nodes {
		share := 0.0
		if a.total > 0 {
			share = float64(d) / float64(a.total)
		}
		a.shares = append(a.shares, share)
		if quota > 0 && elapsed > 0 {
			a.quotaUse = append(a.quotaUse, d.Seconds()/(quota*elapsed.Seconds()))
		}
	}
	return a
}

// scaleRatios fills each counting row's ratios against the one-node row
// of the same run and quota (of the same durability in force where the run
// has one, else of the one-node default), and the three-node row of the
// same run, replicas, quota and durability.
func scaleRatios(rows []scaleRow) {
	find := func(run, nodes, replicas int, quota float64, durability string) *scaleRow {
		for i := range rows {
			b := &rows[i]
			if b.Run == run && b.Nodes == nodes && (replicas == 0 || b.Replicas == replicas) && b.QuotaCores == quota &&
				(durability == "" || b.Durability == durability) && b.counts() {
				return b
			}
		}
		return nil
	}
	for i := range rows {
		r := &rows[i]
		if !r.counts() {
			continue
		}
		one := find(r.Run, 1, 0, r.QuotaCores, r.Durability)
		if one == nil {
			one = find(r.Run, 1, 0, r.QuotaCores, "")
		}
		if one != nil {
			r.VsOneNode = r.HooksPerSec / one.HooksPerSec
		}
		if r.Nodes > 3 {
			if three := find(r.Run, 3, r.Replicas, r.QuotaCores, r.Durability); three != nil {
				r.VsThreeNodes = r.HooksPerSec / three.HooksPerSec
			}
		}
	}
}

// mergedTop writes `go tool pprof -top` of the nodes' profiles merged
// (flat and -cum) to prefix.top.txt and prefix.cum.txt.
func mergedTop(ctx context.Context, files []string, prefix string) error {
	for _, v := range []struct{ suffix, flag string }{{".top.txt", "-flat"}, {".cum.txt", "-cum"}} {
		args := append([]string{"tool", "pprof", "-top", v.flag, "-nodecount=80"}, files...)
		out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go tool pprof: %v: %s", err, firstLine(string(out)))
		}
		if err := os.WriteFile(prefix+v.suffix, out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// printScale writes the rows as a Markdown table.
func printScale(w io.Writer, rows []scaleRow, o *options) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== scale: %d workers per node, %d-byte bodies, a fresh Idempotency-Key per hook, %d tenants, round robin over the nodes; %s per row after %s ==\n\n",
		o.scaleWorkers, len(scaleBody(o.scaleBody)), o.scaleTenants, o.duration, o.warmup)
	fmt.Fprintln(w, "| run | nodes | replicas | shards | quota per node | durability | hooks/s (202) | non-2xx | vs one node | vs 3 nodes | fleet CPU per hook | node CPU shares | quota used | host idle | other load | 202 in HOOKS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		ratio := func(v float64) string {
			if v == 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f×", v)
		}
		idle := fmt.Sprintf("%.0f%%", 100*r.HostIdle)
		if r.HostSaturated {
			idle += " (host saturated: does not count)"
		}
		check := fmt.Sprintf("%d / %d", r.StreamMsgs, r.Answered202)
		if r.Error != "" {
			check += " — " + r.Error
		}
		fmt.Fprintf(w, "| %d | %d | R%d | %d | %s | %s | %s | %d | %s | %s | %.0f µs | %s | %s | %s | %.2f cores | %s |\n",
			r.Run, r.Nodes, r.Replicas, max(r.Shards, 1), quotaText(r.QuotaCores), r.Durability, thousands(r.HooksPerSec), r.Non2xx+r.Duplicates,
			ratio(r.VsOneNode), ratio(r.VsThreeNodes), r.FleetCPUPerHookUs, percents(r.NodeCPUShare), percents(r.NodeQuotaUse), idle, r.OtherCores, check)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nrun\trow\tready\tp50\tp99\tload generator\tstatus counts (whole row)\tfirst error\tleaders")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d/R%d/%s/s%d\t%.1f s\t%s\t%s\t%.2f cores\t%v\t%s\t%s\n", r.Run, r.Nodes, r.Replicas, quotaText(r.QuotaCores), max(r.Shards, 1), r.ReadySec,
			fmtUs(r.P50Us), fmtUs(r.P99Us), r.LoadGenCores, r.StatusCounts, r.FirstError, strings.Join(r.Leaders, ", "))
	}
	_ = tw.Flush()
}

func percents(xs []float64) string {
	if len(xs) == 0 {
		return "—"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.0f", 100*x)
	}
	return strings.Join(s, "/") + "%"
}
