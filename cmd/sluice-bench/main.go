// Command sluice-bench measures sluice against Redis on one machine, in one
// run, with the same workload:
//
//   - quota rows: sluice's quota.hit (a cmd/edge process; this process is
//     the load generator, talking to it over TCP loopback with quota.Router)
//     against a redis-server driven with go-redis (GCRA in one Lua script,
//     GCRA + SET NX PX claim in one Lua script), for the workloads
//     decisions, hit+claim and hot at each --inflight;
//   - edge row: webhooks/s through the edge's HTTP API against the floor of
//     a bare net/http handler doing one JetStream publish per request
//     (./floor-server, a command of this module);
//   - memory: bytes per idle GCRA bucket in a partition owner, per stored
//     claim in JetStream, and the same in Redis;
//   - scale (--workloads scale, not in the default; root): N cmd/edge
//     nodes, their embedded nats-servers in one cluster, each node under a
//     cgroup CPU quota, driven over HTTP from this process (outside the
//     quotas): hooks/s, the fleet's CPU per hook, each node's share, the
//     host's idle CPU, every 202 checked against the HOOKS stream
//     (scale.go); scale-memory: server heap per stored claim per node of
//     N-node R3 fleets (scalemem.go).
//
// Rows run interleaved (sluice, then Redis, per row) so that each ratio is
// taken side by side; --repeat repeats the whole matrix to show the spread.
//
// It is a module of its own (the library's go.mod carries none of its
// dependencies); run it from its directory:
//
//	cd cmd/sluice-bench
//	go run .                       # everything, 10 s per row
//	go run . --repeat 3 --json ../../testdata/bench/baseline.json
//	go run . --workloads decisions --inflight 64 --duration 5s
//	go run . --profile /tmp/prof   # plus a profiled pass of the sluice rows
//	go run . --workloads scale --scale-rows 1/1/0.4,3/3/0.4 --duration 10s
//	go run . --workloads scale-memory --scale-memory-nodes 3,6
//	go run . --workloads tail --tail-rate 1500 --duration 3m --slices 6
//	go run . --workloads disk --duration 90s
//
// Redis rows need redis-server in PATH (apt-get update && apt-get install -y
// redis-server); without it they are reported as skipped.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/cmd/sluice-bench/internal/procstat"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line.
type options struct {
	duration     time.Duration
	warmup       time.Duration
	inflight     []int
	workloads    []workload
	edge         bool
	memory       bool
	repeat       int
	slices       int
	drain        bool
	jsonClient   bool
	jsonPath     string
	svgPath      string
	edgeBin      string
	partitions   int
	httpInflight int
	httpTenants  int
	claims       int
	profileDir   string
	timeout      time.Duration

	// The scale rows (--workloads scale).
	scale           bool
	scaleRows       []scaleSpec
	scaleWorkers    int
	scaleTenants    int
	scaleBody       int
	scaleDurability string
	scaleProfile    string
	scaleMemory     bool // --workloads scale-memory
	// The substrate rows (--workloads substrate, substrate.go).
	substrate     bool
	substrateRows []substrateSpec
	scaleMemNodes []scaleSpec
	scaleClaims   int

	disk           bool // --workloads disk
	tail           bool // --workloads tail
	tailRate       int
	tailDurability string
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("sluice-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &options{}
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time of each row")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before each row")
	inflight := fs.String("inflight", "1,64", "requests in flight, comma-separated (one row each)")
	names := fs.String("workloads", "decisions,hit+claim,cycle-durable,hot,edge,memory", "what to run: decisions, hit+claim, cycle-durable, hot (sluice vs Redis), edge (HTTP: durable, acked, floor), memory; scale (N nodes under CPU quotas, as root) and scale-memory (heap per claim per server of N-node R3 fleets) and substrate (bare nats-server under the same quotas: msgs/s one per publish and in atomic batches) and tail (one node at a paced --tail-rate: latency percentiles per slice), disk (fdatasync latency of the bench's directory for --duration): not in the default")
	fs.IntVar(&o.tailRate, "tail-rate", 1500, "tail: hooks per second, paced")
	fs.StringVar(&o.tailDurability, "tail-durability", "", "tail: the node's --durability (empty: the edge's default)")
	fs.IntVar(&o.repeat, "repeat", 1, "run the whole matrix this many times")
	fs.IntVar(&o.slices, "slices", 5, "cut each row into this many slices, run A B, B A … so both systems see the same background load")
	fs.BoolVar(&o.drain, "drain", true, "after a hit+claim row, wait until its pending claims have expired on both systems (and report what expiry cost)")
	fs.BoolVar(&o.jsonClient, "json-client", true, "also measure sluice with quota.WithCoalescing(false) (one JSON request per hit), as row sluice-json")
	fs.StringVar(&o.jsonPath, "json", "", "also write the results as JSON to this file (- for stdout; the tables then go to stderr)")
	fs.StringVar(&o.svgPath, "svg", "", "also write a bar chart (ops/s and p99 per row, sluice vs Redis or floor; SVG) to this file")
	fs.StringVar(&o.edgeBin, "edge-bin", "", "use this cmd/edge binary instead of building ./cmd/edge")
	fs.IntVar(&o.partitions, "partitions", protocol.DefaultPartitions, "quota partitions of the edge (and the client)")
	fs.IntVar(&o.httpInflight, "http-inflight", 32, "concurrent HTTP clients of the edge row")
	fs.IntVar(&o.httpTenants, "http-tenants", 1000, "tenants of the edge row (round robin)")
	fs.IntVar(&o.claims, "memory-claims", 100_000, "claims stored for the bytes-per-claim figure")
	fs.StringVar(&o.profileDir, "profile", "", "after the runs, profile the sluice rows at the largest --inflight (and the edge row) into this directory")
	scaleRows := fs.String("scale-rows", defaultScaleRows, "scale rows: nodes/replicas/quota cores per node (0: no quota), comma-separated")
	fs.IntVar(&o.scaleWorkers, "scale-workers", 24, "scale rows: closed-loop HTTP workers per node")
	fs.IntVar(&o.scaleTenants, "scale-tenants", 997, "scale rows: tenants, round robin")
	fs.IntVar(&o.scaleBody, "scale-body", 600, "scale rows: bytes of each hook's JSON body")
	fs.StringVar(&o.scaleDurability, "scale-durability", "", "scale rows: the nodes' --durability (empty: the edge's default)")
	fs.StringVar(&o.scaleProfile, "scale-profile", "", "scale rows: take a CPU profile of every node during each row's window into this directory (the rows' figures then include pprof's cost)")
	substrateRows := fs.String("substrate-rows", defaultSubstrateRows, "substrate: bare nats-server rows servers/replicas/quota/sync/publish (sync default|always, publish single|atomicK), comma-separated; --scale-workers publishers per server, --scale-body bytes")
	memNodes := fs.String("scale-memory-nodes", "3,6", "scale-memory: fleet sizes (R3; R1 for 1 node), comma-separated; N/sS: over S shards (--partitions P/S)")
	fs.IntVar(&o.scaleClaims, "scale-claims", 1_000_000, "scale-memory: claims stored in each fleet")
	fs.DurationVar(&o.timeout, "timeout", 0, "bound of the whole run (0: computed from the plan, plus 10 minutes)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice-bench [flags]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, s := range strings.Split(*inflight, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("--inflight: %q is not a count 1..4096", s)
		}
		o.inflight = append(o.inflight, n)
	}
	for _, s := range strings.Split(*names, ",") {
		switch s = strings.TrimSpace(s); s {
		case "edge":
			o.edge = true
		case "memory":
			o.memory = true
		case "scale":
			o.scale = true
		case "scale-memory":
			o.scaleMemory = true
		case "substrate":
			o.substrate = true
		case "tail":
			o.tail = true
		case "disk":
			o.disk = true
		case "":
		default:
			w, ok := workloadByName(s)
			if !ok {
				return nil, fmt.Errorf("--workloads: unknown %q (decisions, hit+claim, cycle-durable, hot, edge, memory, scale, scale-memory, substrate, tail, disk)", s)
			}
			o.workloads = append(o.workloads, w)
		}
	}
	switch {
	case o.duration <= 0 || o.warmup < 0:
		return nil, errors.New("--duration must be > 0 and --warmup >= 0")
	case o.repeat < 0 || o.repeat == 0 && o.profileDir == "" || o.slices < 1:
		return nil, errors.New("--repeat must be >= 1 (0 only with --profile: profile, measure nothing else) and --slices >= 1")
	case o.httpInflight < 1 || o.httpTenants < 1 || o.claims < 1:
		return nil, errors.New("--http-inflight, --http-tenants and --memory-claims must be >= 1")
	case o.partitions < 1 || o.partitions > quota.MaxPartitions:
		return nil, fmt.Errorf("--partitions must be 1..%d", quota.MaxPartitions)
	}
	var err error
	if o.scaleRows, err = parseScaleRows(*scaleRows); err != nil {
		return nil, err
	}
	if o.substrateRows, err = parseSubstrateRows(*substrateRows); err != nil {
		return nil, err
	}
	for _, f := range strings.Split(*memNodes, ",") {
		nodes, shards, _ := strings.Cut(strings.TrimSpace(f), "/s")
		n, err := strconv.Atoi(nodes)
		k, kerr := strconv.Atoi(cmp.Or(shards, "1"))
		if err != nil || kerr != nil || n < 1 || n > 16 || k < 1 || k > 16 {
			return nil, fmt.Errorf("--scale-memory-nodes: %q is not a count 1..16 (with /sS: S shards, 1..16)", f)
		}
		o.scaleMemNodes = append(o.scaleMemNodes, scaleSpec{Nodes: n, Replicas: min(3, n), Shards: k})
	}
	if o.tailRate < 1 || o.tailRate > 100_000 {
		return nil, errors.New("--tail-rate must be 1..100000")
	}
	if o.scaleWorkers < 1 || o.scaleTenants < 1 || o.scaleBody < 1 || o.scaleClaims < 1 {
		return nil, errors.New("--scale-workers, --scale-tenants and --scale-body must be >= 1")
	}
	if o.timeout <= 0 {
		o.timeout = o.plannedTime() + 10*time.Minute
	}
	return o, nil
}

// plannedTime is how long the rows take (without start-up and memory).
func (o *options) plannedTime() time.Duration {
	row := o.duration + o.warmup
	contenders := 2
	if o.jsonClient {
		contenders = 3
	}
	rows := contenders * len(o.workloads) * len(o.inflight)
	if o.edge {
		rows += 3
	}
	total := time.Duration(rows*o.repeat)*row + time.Duration(rows*o.repeat*o.slices)*sliceWarmup
	if o.drain {
		for _, w := range o.workloads {
			if w.Claim && !w.Settle {
				total += time.Duration(len(o.inflight)*o.repeat) * (pendingTTL + 45*time.Second)
			}
		}
	}
	if o.profileDir != "" {
		total += time.Duration(len(o.workloads)+1) * row
	}
	if o.scale {
		// Each row starts and stops a fleet (up to a minute on 2 cores).
		total += time.Duration(len(o.scaleRows)*o.repeat) * (row + time.Minute)
	}
	if o.tail {
		total += row + time.Minute
	}
	if o.disk {
		total += o.duration
	}
	if o.substrate {
		total += time.Duration(len(o.substrateRows)*o.repeat) * (row + time.Minute)
	}
	if o.scaleMemory {
		// Writing at 1,000 claims/s at worst, then the caches' expiry.
		total += time.Duration(len(o.scaleMemNodes)) * (time.Duration(o.scaleClaims)*time.Millisecond + 5*time.Minute)
	}
	return total
}

// report is the JSON output.
type report struct {
	Started   time.Time      `json:"started"`
	Machine   machine        `json:"machine"`
	Settings  settings       `json:"settings"`
	Runs      []runResult    `json:"runs"`
	Summary   []summaryRow   `json:"summary"`
	Goals     []goal         `json:"goals,omitempty"`
	Memory    *memoryResult  `json:"memory,omitempty"`
	Profiles  []profileEntry `json:"profiles,omitempty"`
	Scale     []scaleRow     `json:"scale,omitempty"`
	ScaleMem  []scaleMemRow  `json:"scale_memory,omitempty"`
	Substrate []substrateRow `json:"substrate,omitempty"`
	Tail      *tailResult    `json:"tail,omitempty"`
	Disk      *diskResult    `json:"disk,omitempty"`
}

type settings struct {
	Duration     string            `json:"duration"`
	Warmup       string            `json:"warmup"`
	Inflight     []int             `json:"inflight"`
	Repeat       int               `json:"repeat"`
	Slices       int               `json:"slices"`
	JSONClient   bool              `json:"json_client"`
	Partitions   int               `json:"partitions"`
	HTTPInflight int               `json:"http_inflight"`
	HTTPTenants  int               `json:"http_tenants"`
	HTTPBody     int               `json:"http_body_bytes"`
	Workloads    map[string]string `json:"workloads"`
	Scale        *scaleSettings    `json:"scale,omitempty"`
}

type scaleSettings struct {
	Rows       []string `json:"rows"`
	Workers    int      `json:"workers_per_node"`
	Tenants    int      `json:"tenants"`
	BodyBytes  int      `json:"body_bytes"`
	Durability string   `json:"durability,omitempty"`
}

// bench holds the processes and clients of one invocation.
type bench struct {
	o         *options
	out       io.Writer
	log       io.Writer
	tmp       string
	root      string // the library module (./cmd/edge)
	benchDir  string // this module (./floor-server)
	edgeBin   string // the cmd/edge binary, once built
	edge      *edgeProc
	edgeAcked *edgeProc // --durability acked: the edge without the barrier
	nc        *nats.Conn
	qc        *quota.Router
	cl        *client.Client // claims.settle of the claim cycle
	ncAcked   *nats.Conn     // to edgeAcked: the durable rows' sluice-acked
	qcAcked   *quota.Router
	ncJSON    *nats.Conn
	qcJSON    *quota.Router // WithCoalescing(false), with --json-client
	redis     *child
	rdb       *redis.Client
	redisAddr string
	rskip     string
	redisAOF  *child        // appendfsync always (the durable rows)
	rdbAOF    *redis.Client // nil: skipped (aofSkip)
	aofSkip   string
	floor     *child
	floorU    string
	self      int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice-bench:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	out := stdout
	if o.jsonPath == "-" {
		out = stderr
	}
	b := &bench{o: o, out: out, log: stderr, self: os.Getpid()}
	rep, err := b.run(ctx)
	b.close()
	if rep != nil && o.jsonPath != "" {
		if werr := writeJSON(o.jsonPath, stdout, rep); werr != nil {
			fmt.Fprintln(stderr, "sluice-bench: json:", werr)
			if err == nil {
				err = werr
			}
		}
	}
	if rep != nil && o.svgPath != "" {
		if werr := writeSVG(o.svgPath, rep.Summary); werr != nil {
			fmt.Fprintln(stderr, "sluice-bench: svg:", werr)
			if err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice-bench:", err)
		return 1
	}
	return 0
}

func writeJSON(path string, stdout io.Writer, rep *report) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "-" {
		_, err = stdout.Write(data)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// close stops everything the bench started, in reverse order.
func (b *bench) close() {
	if b.rdb != nil {
		_ = b.rdb.Close()
	}
	if b.rdbAOF != nil {
		_ = b.rdbAOF.Close()
	}
	b.redisAOF.stop(10 * time.Second)
	if b.edgeAcked != nil {
		b.edgeAcked.stop(15 * time.Second)
	}
	if b.nc != nil {
		b.nc.Close()
	}
	if b.ncJSON != nil {
		b.ncJSON.Close()
	}
	if b.ncAcked != nil {
		b.ncAcked.Close()
	}
	b.floor.stop(10 * time.Second)
	b.redis.stop(10 * time.Second)
	if b.edge != nil {
		b.edge.stop(15 * time.Second)
	}
	if b.tmp != "" {
		_ = os.RemoveAll(b.tmp)
	}
}

func (b *bench) run(ctx context.Context) (*report, error) {
	o := b.o
	rep := &report{Started: time.Now().UTC(), Settings: settings{
		Duration: o.duration.String(), Warmup: o.warmup.String(), Inflight: o.inflight, Repeat: o.repeat,
		Slices: o.slices, JSONClient: o.jsonClient, Partitions: o.partitions, HTTPInflight: o.httpInflight, HTTPTenants: o.httpTenants, HTTPBody: len(hookBody),
		Workloads: map[string]string{},
	}}
	for _, w := range o.workloads {
		rep.Settings.Workloads[w.Name] = w.Doc
	}
	if o.edge {
		rep.Settings.Workloads["edge"] = fmt.Sprintf("POST /v1/hooks/{tenant}/bench, %d B JSON body, unique Idempotency-Key, %d tenants; edge (durable default) and edge-acked (--durability acked) vs floor-server", len(hookBody), o.httpTenants)
		rep.Settings.Workloads["edge-barrier"] = "the same hooks: edge (durable default: a group sync round before the 202) vs edge-acked (no barrier)"
	}
	if o.scale {
		ss := &scaleSettings{Workers: o.scaleWorkers, Tenants: o.scaleTenants, BodyBytes: len(scaleBody(o.scaleBody)), Durability: o.scaleDurability}
		for _, r := range o.scaleRows {
			ss.Rows = append(ss.Rows, r.String())
		}
		rep.Settings.Scale = ss
		rep.Settings.Workloads["scale"] = "N cmd/edge nodes in one cluster, each under a CPU quota (cgroup); closed-loop HTTP POST /v1/hooks/{tenant}/bench, a fresh Idempotency-Key per hook, round robin over the nodes; every 202 checked against the HOOKS stream"
	}
	var err error
	if b.tmp, err = os.MkdirTemp("", "sluice-bench-"); err != nil {
		return nil, err
	}
	needQuota := len(o.workloads) > 0 || o.edge
	if (needQuota && o.edgeBin == "") || o.edge || ((o.scale || o.scaleMemory || o.tail) && o.edgeBin == "") || o.substrate {
		if b.root, b.benchDir, err = moduleDirs(ctx); err != nil {
			return nil, err
		}
	}
	rep.Machine = describeMachine(ctx, b.root)
	b.logf("machine: %s, %d CPUs, %s", rep.Machine.CPUModel, rep.Machine.NumCPU, rep.Machine.GoVersion)
	if needQuota || o.profileDir != "" {
		if err := b.startSluice(ctx, o.profileDir != ""); err != nil {
			return rep, err
		}
	}
	if len(o.workloads) > 0 || o.memory {
		b.startRedis(ctx)
		rep.Machine.Redis = b.redisVersion(ctx)
	}
	if o.edge {
		b.logf("building and starting floor-server")
		bin, err := buildCommand(ctx, b.benchDir, "floor-server", filepath.Join(b.tmp, "bin"))
		if err != nil {
			return rep, err
		}
		if b.floor, b.floorU, err = startFloor(ctx, bin, filepath.Join(b.tmp, "floor")); err != nil {
			return rep, err
		}
	}
	for i := 1; i <= o.repeat; i++ {
		rr := runResult{Run: i, LoadAvg: procstat.LoadAvg()}
		for _, w := range o.workloads {
			for _, n := range o.inflight {
				var before baseline
				drain := w.Claim && !w.Settle && o.drain
				if drain {
					before = b.storeBaseline(ctx)
				}
				rr.Pairs = append(rr.Pairs, b.quotaPair(ctx, i, w, n)...)
				if ctx.Err() != nil {
					return rep, ctx.Err()
				}
				if drain {
					if d := b.drainClaims(ctx, i, w, n, before); d != nil {
						rr.Drains = append(rr.Drains, d)
					}
				}
			}
		}
		if o.edge {
			rr.Pairs = append(rr.Pairs, b.edgePair(ctx, i)...)
		}
		if len(rr.Pairs) == 0 {
			break // memory only
		}
		rep.Runs = append(rep.Runs, rr)
		printRun(b.out, rr)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
	}
	rep.Summary = summarize(rep.Runs)
	if len(rep.Summary) > 0 {
		printSummary(b.out, rep.Summary, len(rep.Runs))
	}
	if o.scale {
		rep.Scale, err = b.scale(ctx)
		printScale(b.out, rep.Scale, o)
		if !o.substrate {
			printAccount(b.out, rep.Scale, nil)
		}
		if err != nil {
			return rep, err
		}
	}
	if o.substrate {
		rep.Substrate, err = b.substrate(ctx)
		printSubstrate(b.out, rep.Substrate, o.scaleWorkers, len(scaleBody(o.scaleBody)))
		printAccount(b.out, rep.Scale, rep.Substrate)
		if err != nil {
			return rep, err
		}
	}
	if o.scaleMemory {
		rep.ScaleMem, err = b.scaleMemory(ctx)
		printScaleMemory(b.out, rep.ScaleMem)
		if err != nil {
			return rep, err
		}
	}
	if o.disk {
		rep.Disk, err = b.disk(ctx)
		printDisk(b.out, rep.Disk)
		if err != nil {
			return rep, err
		}
	}
	if o.tail {
		rep.Tail, err = b.tail(ctx)
		printTail(b.out, rep.Tail)
		if err != nil {
			return rep, err
		}
	}
	if o.memory {
		rep.Memory = b.memory(ctx)
		printMemory(b.out, rep.Memory)
	}
	if o.profileDir != "" {
		rep.Profiles, err = b.profile(ctx)
		printProfiles(b.out, rep.Profiles)
		if err != nil {
			return rep, err
		}
	}
	rep.Goals = checkGoals(rep.Summary, rep.Memory, slices.Max(o.inflight))
	printGoals(b.out, rep.Goals)
	return rep, ctx.Err()
}

// edgeBinary is --edge-bin, or ./cmd/edge built once into the bench's
// temporary directory.
func (b *bench) edgeBinary(ctx context.Context) (string, error) {
	if b.o.edgeBin != "" {
		return b.o.edgeBin, nil
	}
	if b.edgeBin == "" {
		b.logf("building ./cmd/edge")
		bin, err := buildCommand(ctx, b.root, "cmd/edge", filepath.Join(b.tmp, "bin"))
		if err != nil {
			return "", err
		}
		b.edgeBin = bin
	}
	return b.edgeBin, nil
}

func (b *bench) startSluice(ctx context.Context, pprof bool) error {
	bin, err := b.edgeBinary(ctx)
	if err != nil {
		return err
	}
	b.logf("starting edge")
	dir := filepath.Join(b.tmp, "edge")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if b.edge, err = startEdge(ctx, bin, dir, b.o.partitions, pprof); err != nil {
		return err
	}
	if b.nc, b.qc, err = connectQuota(b.edge.natsURL, b.o.partitions, true); err != nil {
		return err
	}
	if b.cl, err = client.New(b.nc, client.WithSettleTimeout(opTimeout)); err != nil {
		return err
	}
	if b.o.jsonClient {
		if b.ncJSON, b.qcJSON, err = connectQuota(b.edge.natsURL, b.o.partitions, false); err != nil {
			return err
		}
	}
	if err := waitPartitions(ctx, b.qc); err != nil {
		return fmt.Errorf("edge serves no quota: %w\n%s", err, b.edge.out.String())
	}
	b.logf("edge ready: %s, %s", b.edge.httpURL, b.edge.natsURL)
	durableRows := slices.ContainsFunc(b.o.workloads, func(w workload) bool { return w.Durable })
	if b.o.edge || durableRows {
		adir := filepath.Join(b.tmp, "edge-acked")
		if err := os.MkdirAll(adir, 0o755); err != nil {
			return err
		}
		if b.edgeAcked, err = startEdge(ctx, bin, adir, b.o.partitions, false, "--durability", "acked"); err != nil {
			return fmt.Errorf("edge --durability acked: %w", err)
		}
		b.logf("edge --durability acked ready: %s", b.edgeAcked.httpURL)
	}
	if durableRows {
		if b.ncAcked, b.qcAcked, err = connectQuota(b.edgeAcked.natsURL, b.o.partitions, true); err != nil {
			return err
		}
		if err := waitPartitions(ctx, b.qcAcked); err != nil {
			return fmt.Errorf("edge --durability acked serves no quota: %w", err)
		}
	}
	return nil
}

func (b *bench) startRedis(ctx context.Context) {
	if slices.ContainsFunc(b.o.workloads, func(w workload) bool { return w.Durable }) {
		b.startRedisAOF(ctx)
	}
	c, addr, rdb, err := startRedisRow(ctx, filepath.Join(b.tmp, "redis"), false, slices.Max(b.o.inflight)+8)
	if err != nil {
		b.rskip = err.Error()
		b.logf("redis: skipped: %v", err)
		return
	}
	b.redis, b.redisAddr, b.rdb = c, addr, rdb
	b.logf("redis-server ready on %s", addr)
}

// startRedisAOF starts the Redis of the durable rows: every write is in
// the append-only file, fsynced, before its reply.
func (b *bench) startRedisAOF(ctx context.Context) {
	c, addr, rdb, err := startRedisRow(ctx, filepath.Join(b.tmp, "redis-aof"), true, slices.Max(b.o.inflight)+8)
	if err != nil {
		b.aofSkip = err.Error()
		b.logf("redis appendfsync always: skipped: %v", err)
		return
	}
	b.redisAOF, b.rdbAOF = c, rdb
	b.logf("redis-server (appendonly yes, appendfsync always) ready on %s", addr)
}

func (b *bench) redisVersion(ctx context.Context) string {
	if b.rdb == nil {
		return "skipped: " + b.rskip
	}
	s, err := b.rdb.Info(ctx, "server").Result()
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

// measure runs one row against server (its CPU is sampled at the window's
// edges) and returns it.
func (b *bench) measure(ctx context.Context, run int, name string, inflight int, system string, server *child, op opFunc, errs *firstError, hooks window) row {
	var s0, s1, c0, c1 time.Duration
	var seq atomic.Uint64
	res := runLoad(ctx, inflight, b.o.warmup, b.o.duration, &seq, op, window{
		start: func() {
			s0, _ = procstat.CPUTime(server.pid())
			c0, _ = procstat.CPUTime(b.self)
			if hooks.start != nil {
				hooks.start()
			}
		},
		end: func() {
			s1, _ = procstat.CPUTime(server.pid())
			c1, _ = procstat.CPUTime(b.self)
			if hooks.end != nil {
				hooks.end()
			}
		},
	}, errs.String)
	r := newRow(run, name, inflight, system, res, s1-s0, c1-c0)
	b.logf("run %d %-9s in flight %3d %-6s %10.0f ops/s  p50 %s  p99 %s  errors %d", run, name, inflight, system,
		r.OpsPerSec, fmtUs(r.P50Us), fmtUs(r.P99Us), r.Outcomes["error"])
	return r
}

// keyPrefix makes claim keys unique across rows, runs and invocations.
// (A NUID's first 12 characters are fixed per process: take its tail.)
func keyPrefix() string {
	id := nuid.Next()
	return id[len(id)-8:] + "-"
}

func (b *bench) memory(ctx context.Context) *memoryResult {
	m := &memoryResult{}
	b.logf("memory: idle GCRA buckets of %d tenants in one owner", idleTenants)
	if bb, err := bucketMemory(ctx, idleTenants); err != nil {
		m.BucketError = err.Error()
	} else {
		m.BucketBytes = bb
	}
	b.logf("memory: %d claims in JetStream KV", b.o.claims)
	dir := filepath.Join(b.tmp, "claims-memory")
	if cm, err := claimsStoreMemory(ctx, dir, b.o.claims); err != nil {
		m.ClaimsError = err.Error()
	} else {
		m.Claims = cm
	}
	_ = os.RemoveAll(dir)
	if b.rdb == nil {
		m.RedisSkipped = b.rskip
		return m
	}
	b.logf("memory: redis keys")
	// Its own client: FLUSHALL of a big database can outlast the load
	// client's 5 s read timeout on a busy machine.
	rdb := redis.NewClient(&redis.Options{Addr: b.redisAddr, ReadTimeout: 2 * time.Minute, WriteTimeout: time.Minute, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	defer rdb.Close()
	if rm, err := redisStoreMemory(ctx, rdb, 1_000_000, b.o.claims); err != nil {
		m.RedisSkipped = err.Error()
	} else {
		m.Redis = rm
	}
	return m
}

// machine describes where the figures come from.
type machine struct {
	NumCPU     int      `json:"num_cpu"`
	GOMAXPROCS int      `json:"gomaxprocs"`
	CPUModel   string   `json:"cpu_model"`
	Lscpu      []string `json:"lscpu_head,omitempty"`
	GoVersion  string   `json:"go_version"`
	Kernel     string   `json:"kernel,omitempty"`
	Redis      string   `json:"redis_version,omitempty"`
	Commit     string   `json:"commit,omitempty"`
}

func describeMachine(ctx context.Context, root string) machine {
	m := machine{NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
	if out, err := exec.CommandContext(ctx, "lscpu").Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, "Model name:"); ok {
				m.CPUModel = strings.TrimSpace(v)
			}
		}
		for i, l := range lines {
			if i >= 10 {
				break
			}
			m.Lscpu = append(m.Lscpu, strings.Join(strings.Fields(l), " "))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if root != "" {
		cmd := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD")
		cmd.Dir = root
		if out, err := cmd.Output(); err == nil {
			m.Commit = strings.TrimSpace(string(out))
		}
	}
	return m
}
