package main

// The substrate rows (--workloads substrate): bare nats-server, the
// version the library's go.mod names, built from the module cache, N
// processes routed into one cluster (one standalone), each in a cgroup
// with a CPU quota as the scale rows' nodes are, and a closed loop of
// JetStream publishes of 600-byte messages to one stream: one message per
// publish, or atomic batches of K (K-1 messages without a reply, then the
// commit, whose ack answers the batch). What it stores per second is the
// ceiling sluice builds on at that quota: the scale rows read as a fraction
// of it (docs/BENCHMARKS.md).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/sluice-dev/sluice/cmd/sluice-bench/internal/procstat"
)

// substrateSpec is one row: servers/replicas/quota/sync/publish[/sN],
// sync "default" (nats-server's 2-minute interval) or "always", publish
// "single" or "atomicK", sN: N streams (default 1), stream k led by server
// k mod servers, and each server's publishers on the stream it leads
// (server i on stream i mod N): the most an N-node fleet of one shard per
// node can store.
type substrateSpec struct {
	Servers, Replicas int
	Quota             float64
	SyncAlways        bool
	Batch             int // messages per publish: 1 single, K atomic batch
	Streams           int // 0 or 1: one stream, BENCH
}

func (s substrateSpec) String() string {
	sync, pub := "default", "single"
	if s.SyncAlways {
		sync = "always"
	}
	if s.Batch > 1 {
		pub = "atomic" + strconv.Itoa(s.Batch)
	}
	out := fmt.Sprintf("%d/%d/%s/%s/%s", s.Servers, s.Replicas, strconv.FormatFloat(s.Quota, 'f', -1, 64), sync, pub)
	if s.Streams > 1 {
		out += "/s" + strconv.Itoa(s.Streams)
	}
	return out
}

// streamName is the name of stream k of a row (BENCH for one stream).
func (s substrateSpec) streamName(k int) string {
	if s.Streams <= 1 {
		return "BENCH"
	}
	return "BENCH_" + strconv.Itoa(k)
}

// streamSubject is the subject filter of stream k.
func (s substrateSpec) streamSubject(k int) string {
	if s.Streams <= 1 {
		return "bench.>"
	}
	return "bench." + strconv.Itoa(k) + ".>"
}

// defaultSubstrateRows are the bare rows issue 40 reads sluice's scale
// rows against: one server and three at R3 with sync always, one message
// per publish and in atomic batches.
const defaultSubstrateRows = "1/1/0.4/default/single,1/1/0.4/default/atomic16,3/3/0.4/always/single,3/3/0.4/always/atomic4,3/3/0.4/always/atomic16"

// parseSubstrateRows reads --substrate-rows.
func parseSubstrateRows(s string) ([]substrateSpec, error) {
	var out []substrateSpec
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		bad := fmt.Errorf("--substrate-rows: %q is not servers/replicas/quota/sync/publish[/sN] (e.g. 3/3/0.4/always/atomic16 or 3/1/0.2/always/single/s3; sync default|always, publish single|atomicK, sN: N streams, one led by each server)", f)
		p := strings.Split(f, "/")
		var sp substrateSpec
		if len(p) == 6 {
			k, ok := strings.CutPrefix(p[5], "s")
			n, err := strconv.Atoi(k)
			if !ok || err != nil || n < 1 || n > 16 {
				return nil, bad
			}
			sp.Streams = n
			p = p[:5]
		}
		if len(p) != 5 {
			return nil, bad
		}
		var err1, err2, err3 error
		sp.Servers, err1 = strconv.Atoi(p[0])
		sp.Replicas, err2 = strconv.Atoi(p[1])
		sp.Quota, err3 = strconv.ParseFloat(p[2], 64)
		if err := errors.Join(err1, err2, err3); err != nil || sp.Servers < 1 || sp.Servers > 16 ||
			sp.Replicas < 1 || sp.Replicas > min(sp.Servers, 5) || sp.Quota < 0 || sp.Quota > 64 || sp.Streams > sp.Servers {
			return nil, bad
		}
		switch p[3] {
		case "default":
		case "always":
			sp.SyncAlways = true
		default:
			return nil, bad
		}
		switch k, ok := strings.CutPrefix(p[4], "atomic"); {
		case p[4] == "single":
			sp.Batch = 1
		case ok:
			n, err := strconv.Atoi(k)
			if err != nil || n < 2 || n > 1000 {
				return nil, bad
			}
			sp.Batch = n
		default:
			return nil, bad
		}
		out = append(out, sp)
	}
	return out, nil
}

// substrateRow is what one row measured.
type substrateRow struct {
	Run          int       `json:"run"`
	Spec         string    `json:"spec"`
	Workers      int       `json:"workers"`
	Seconds      float64   `json:"seconds"`
	Msgs         uint64    `json:"msgs"` // acked in the window
	MsgsPerSec   float64   `json:"msgs_per_sec"`
	Errors       uint64    `json:"errors"`
	CPUPerMsgUs  float64   `json:"cpu_per_msg_us"`
	QuotaUse     []float64 `json:"quota_use,omitempty"`
	HostIdle     float64   `json:"host_idle"`
	StreamMsgs   uint64    `json:"stream_msgs"` // the stream's count at the end (warm-up included)
	AckedInTotal uint64    `json:"acked_total"`
	FirstError   string    `json:"first_error,omitempty"`
	// Leaders are the servers leading each stream after the row.
	Leaders []string `json:"leaders,omitempty"`
	// Profiles and Account: the servers' CPU profiles of the window
	// (--scale-profile) and their account by component (account.go).
	Profiles []string           `json:"profiles,omitempty"`
	Account  *cpuProfileAccount `json:"account,omitempty"`
	Error    string             `json:"error,omitempty"`
}

// substrateConf is a bare server's configuration file.
func substrateConf(n *scaleNode, servers []*scaleNode, sp substrateSpec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: s%d\nlisten: %q\nserver_tags: [%q]\n", n.idx, n.natsAddr, substrateTag(n.idx))
	if n.pprofAddr != "" {
		_, port, _ := strings.Cut(n.pprofAddr, ":")
		fmt.Fprintf(&b, "prof_port: %s\n", port)
	}
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", filepath.Join(n.dir, "js"))
	if sp.SyncAlways {
		b.WriteString("  sync_interval: always\n")
	}
	b.WriteString("}\n")
	if len(servers) > 1 {
		fmt.Fprintf(&b, "cluster {\n  name: bench\n  listen: %q\n  routes: [\n", n.clusterAddr)
		for _, o := range servers {
			fmt.Fprintf(&b, "    \"nats://%s\"\n", o.clusterAddr)
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// substrateTag is server i's placement tag: an R1 stream led by server i
// is placed with it.
func substrateTag(i int) string { return "bench:s" + strconv.Itoa(i) }

// substrate runs every substrate row o.repeat times.
func (b *bench) substrate(ctx context.Context) ([]substrateRow, error) {
	o := b.o
	var cgs *cpuCgroups
	for _, sp := range o.substrateRows {
		if sp.Quota > 0 && cgs == nil {
			var err error
			if cgs, err = findCPUCgroups(); err != nil {
				return nil, err
			}
		}
	}
	b.logf("building nats-server %s", natsServerModule)
	bin, err := buildModuleCommand(ctx, b.benchDir, natsServerModule, filepath.Join(b.tmp, "bin", "nats-server"))
	if err != nil {
		return nil, err
	}
	var rows []substrateRow
	for run := 1; run <= o.repeat; run++ {
		for i, sp := range o.substrateRows {
			r := b.substrateRow(ctx, run, i, sp, bin, cgs)
			b.logf("substrate %s: %.0f msgs/s, %.1f µs CPU per message, %d errors%s", r.Spec, r.MsgsPerSec, r.CPUPerMsgUs, r.Errors, errSuffix(r.Error))
			rows = append(rows, r)
			if ctx.Err() != nil {
				return rows, ctx.Err()
			}
		}
	}
	return rows, nil
}

// natsServerModule is the server the substrate rows run: the library's
// own dependency, at the version its go.mod requires.
const natsServerModule = "github.com/nats-io/nats-server/v2"

// substrateRow starts the servers of sp, loads them, checks the stream
// and stops them (whatever happened).
func (b *bench) substrateRow(ctx context.Context, run, idx int, sp substrateSpec, bin string, cgs *cpuCgroups) substrateRow {
	o := b.o
	r := substrateRow{Run: run, Spec: sp.String(), Workers: o.scaleWorkers * sp.Servers}
	name := fmt.Sprintf("run%d-sub%d", run, idx)
	f := &fleet{}
	conns := []*nats.Conn{}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
		if err := f.stop(); err != nil && r.Error == "" {
			r.Error = err.Error()
		}
	}()
	fail := func(err error) substrateRow {
		r.Error = err.Error()
		return r
	}
	base := filepath.Join(b.tmp, "substrate", name)
	for i := range sp.Servers {
		n := &scaleNode{idx: i, dir: filepath.Join(base, fmt.Sprintf("s%d", i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			return fail(err)
		}
		addrs := []*string{&n.natsAddr, &n.clusterAddr}
		if o.scaleProfile != "" {
			addrs = append(addrs, &n.pprofAddr)
		}
		for _, a := range addrs {
			p, err := freePort()
			if err != nil {
				return fail(err)
			}
			*a = "127.0.0.1:" + strconv.Itoa(p)
		}
		f.nodes = append(f.nodes, n)
	}
	for _, n := range f.nodes {
		conf := filepath.Join(n.dir, "server.conf")
		if err := os.WriteFile(conf, []byte(substrateConf(n, f.nodes, sp)), 0o600); err != nil {
			return fail(err)
		}
		if cgs != nil && sp.Quota > 0 {
			g, err := cgs.create(fmt.Sprintf("%s%d-%s-s%d", cgroupPrefix, os.Getpid(), name, n.idx), sp.Quota)
			if err != nil {
				return fail(err)
			}
			n.cg = g
		}
		c, err := startChild(fmt.Sprintf("nats-server%d", n.idx), bin, []string{"-c", conf}, cleanEnv())
		if err != nil {
			return fail(err)
		}
		n.proc = c
		if n.cg != nil {
			if err := n.cg.add(c.pid()); err != nil {
				return fail(err)
			}
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range f.nodes {
		if err := n.proc.waitTCP(rctx, n.natsAddr); err != nil {
			return fail(err)
		}
		// A server under its quota on a busy host may take more than
		// nats.go's 2 s to send its INFO.
		nc, err := nats.Connect("nats://"+n.natsAddr, nats.Name("sluice-bench-substrate"), nats.MaxReconnects(-1), nats.Timeout(10*time.Second))
		if err != nil {
			return fail(fmt.Errorf("connect to s%d: %w", n.idx, err))
		}
		conns = append(conns, nc)
	}
	js := make([]jetstream.JetStream, len(conns))
	for i, nc := range conns {
		var err error
		if js[i], err = jetstream.New(nc); err != nil {
			return fail(err)
		}
	}
	streams := make([]jetstream.Stream, max(sp.Streams, 1))
	for k := range streams {
		sc := jetstream.StreamConfig{
			Name: sp.streamName(k), Subjects: []string{sp.streamSubject(k)}, Storage: jetstream.FileStorage,
			Replicas: sp.Replicas, AllowAtomicPublish: true,
		}
		if sp.Servers > 1 && sp.Replicas == 1 {
			sc.Placement = &jetstream.Placement{Tags: []string{substrateTag(k % sp.Servers)}}
		}
		var lastErr error
		for {
			var err error
			actx, acancel := context.WithTimeout(rctx, 2*time.Second)
			streams[k], err = js[0].CreateStream(actx, sc)
			acancel()
			if err == nil {
				break
			}
			if rctx.Err() != nil {
				return fail(fmt.Errorf("create stream %s: %w (before: %v)", sc.Name, err, lastErr))
			}
			lastErr = err
			time.Sleep(100 * time.Millisecond) // the cluster electing its meta leader
		}
		if sp.Streams > 1 && sp.Replicas > 1 {
			if err := leadFrom(rctx, conns[0], streams[k], fmt.Sprintf("s%d", k%sp.Servers)); err != nil {
				return fail(err)
			}
		}
	}
	body := scaleBody(o.scaleBody)
	var acked atomic.Uint64
	errs := &firstError{}
	op := func(ctx context.Context, seq uint64) outcome {
		i := int(seq % uint64(len(conns)))
		subj := "bench." + strconv.FormatUint(seq%1000, 10)
		if sp.Streams > 1 {
			subj = "bench." + strconv.Itoa(i%sp.Streams) + "." + strconv.FormatUint(seq%1000, 10)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		if sp.Batch == 1 {
			_, err = js[i].Publish(pctx, subj, body)
		} else {
			err = publishAtomic(pctx, conns[i], subj, body, sp.Batch)
		}
		if err != nil {
			errs.set(err)
			return outError
		}
		acked.Add(uint64(sp.Batch))
		return outOK
	}
	var cpu0, cpu1 []time.Duration
	var host0, host1 procstat.HostCPU
	sample := func(into *[]time.Duration, host *procstat.HostCPU) {
		*into = (*into)[:0]
		for _, n := range f.nodes {
			d, _ := procstat.CPUTime(n.proc.pid())
			*into = append(*into, d)
		}
		*host, _ = procstat.ReadHostCPU()
	}
	var profWG sync.WaitGroup
	profErrs := make([]error, len(f.nodes))
	var profFiles []string
	if o.scaleProfile != "" {
		if err := os.MkdirAll(o.scaleProfile, 0o755); err != nil {
			return fail(err)
		}
	}
	var seq atomic.Uint64
	res := runLoad(ctx, r.Workers, o.warmup, o.duration, &seq, op, window{
		start: func() {
			if o.scaleProfile != "" {
				secs := max(1, int(o.duration/time.Second))
				for i, n := range f.nodes {
					file := filepath.Join(o.scaleProfile, fmt.Sprintf("%s-%s-s%d.pprof", name, strings.ReplaceAll(sp.String(), "/", "_"), n.idx))
					profFiles = append(profFiles, file)
					profWG.Add(1)
					go func() {
						defer profWG.Done()
						profErrs[i] = fetchProfile(ctx, n.pprofAddr, secs, file)
					}()
				}
			}
			sample(&cpu0, &host0)
		},
		end: func() { sample(&cpu1, &host1) },
	}, errs.String)
	profWG.Wait()
	r.Seconds = res.Elapsed.Seconds()
	r.Msgs = res.Outcomes[outOK] * uint64(sp.Batch)
	r.Errors = res.Ops - res.Outcomes[outOK]
	r.FirstError = res.FirstErr
	if res.Elapsed > 0 {
		r.MsgsPerSec = float64(r.Msgs) / res.Elapsed.Seconds()
	}
	var total time.Duration
	for i := range cpu1 {
		d := cpu1[i] - cpu0[i]
		total += d
		if sp.Quota > 0 && res.Elapsed > 0 {
			r.QuotaUse = append(r.QuotaUse, d.Seconds()/(sp.Quota*res.Elapsed.Seconds()))
		}
	}
	if r.Msgs > 0 {
		r.CPUPerMsgUs = us(total) / float64(r.Msgs)
	}
	r.HostIdle = host1.IdleShare(host0)
	for _, st := range streams {
		info, err := st.Info(ctx)
		if err != nil {
			return fail(err)
		}
		r.StreamMsgs += info.State.Msgs
		leader := "-"
		if info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		r.Leaders = append(r.Leaders, info.Config.Name+": "+leader)
	}
	r.AckedInTotal = acked.Load()
	for i, file := range profFiles {
		if profErrs[i] != nil {
			b.logf("substrate %s: profile of s%d: %v", r.Spec, i, profErrs[i])
			continue
		}
		r.Profiles = append(r.Profiles, file)
	}
	if len(profFiles) > 0 && len(r.Profiles) == len(profFiles) {
		a, err := accountProfiles(r.Profiles, r.Msgs)
		if err != nil {
			b.logf("substrate %s: account: %v", r.Spec, err)
		} else {
			r.Account = &a
		}
	}
	if r.StreamMsgs < r.AckedInTotal {
		return fail(fmt.Errorf("%d messages acked, %d in the stream", r.AckedInTotal, r.StreamMsgs))
	}
	return r
}

// leadFrom makes server the leader of st (a replicated stream): a leader
// step-down asking for it as the preferred leader, until the stream's info
// names it.
func leadFrom(ctx context.Context, nc *nats.Conn, st jetstream.Stream, server string) error {
	name := st.CachedInfo().Config.Name
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	var last string
	for ctx.Err() == nil {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := st.Info(ictx)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case info.Cluster != nil && info.Cluster.Leader == server && len(info.Cluster.Replicas) > 0:
			return nil
		case info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != server:
			last = "leader " + info.Cluster.Leader
			if m, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+name, req, 2*time.Second); err != nil {
				last += "; step-down: " + err.Error()
			} else {
				last += "; step-down: " + string(m.Data)
			}
		default:
			last = "no leader yet"
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("stream %s: leader not moved to %s: %s", name, server, last)
}

// publishAtomic publishes k copies of body to subj as one atomic batch and
// waits for the commit's ack.
func publishAtomic(ctx context.Context, nc *nats.Conn, subj string, body []byte, k int) error {
	id := nuid.Next()
	for i := 1; i < k; i++ {
		m := nats.NewMsg(subj)
		m.Data = body
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i))
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
	}
	m := nats.NewMsg(subj)
	m.Data = body
	m.Header.Set("Nats-Batch-Id", id)
	m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(k))
	m.Header.Set("Nats-Batch-Commit", "1")
	resp, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return err
	}
	var ack struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Count  int                 `json:"count"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return fmt.Errorf("batch ack %q: %w", resp.Data, err)
	}
	if ack.Error != nil {
		return ack.Error
	}
	if ack.Stream == "" || ack.Count != k {
		return fmt.Errorf("batch of %d answered %q", k, resp.Data)
	}
	return nil
}

// buildModuleCommand builds the main package pkg (a module path the bench's
// module resolves) into bin.
func buildModuleCommand(ctx context.Context, dir, pkg, bin string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// printSubstrate prints the substrate rows.
func printSubstrate(w io.Writer, rows []substrateRow, workers, bodyBytes int) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== substrate: bare nats-server %s, %d-byte messages, a closed loop of %d publishers per server ==\n\n", natsServerModule, bodyBytes, workers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "run\tservers/replicas/quota/sync/publish[/streams]\tmsgs/s\tCPU per msg\tquota used\thost idle\terrors\tleaders\tfirst error")
	for _, r := range rows {
		var qu []string
		for _, q := range r.QuotaUse {
			qu = append(qu, fmt.Sprintf("%.0f%%", 100*q))
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.1f µs\t%s\t%.0f%%\t%d\t%s\t%s%s\n", r.Run, r.Spec, r.MsgsPerSec, r.CPUPerMsgUs, strings.Join(qu, "/"), 100*r.HostIdle, r.Errors, strings.Join(r.Leaders, ", "), r.FirstError, errSuffix(r.Error))
	}
	_ = tw.Flush()
}
