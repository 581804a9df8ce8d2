package main

// The scale memory rows (issue 32, item 4, second measurement): a fleet of
// N nodes at R3 (no CPU quota) stores --scale-claims dedupe claims through
// the real path (quota.hit with a claim, sent to each partition's owner,
// written into the one claims bucket), and each server's Go heap is read
// before, right after, and once the file store has dropped its caches of
// the writes (footprint.FilestoreIdle later).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/internal/footprint"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// scaleMemRow is one fleet's memory per stored claim.
type scaleMemRow struct {
	Nodes      int     `json:"nodes"`
	Replicas   int     `json:"replicas"`
	Durability string  `json:"durability,omitempty"`
	Claims     uint64  `json:"claims_in_stream"` // messages of the claims bucket's stream
	Written    uint64  `json:"claims_written"`   // hits answered ok
	WriteSec   float64 `json:"write_s"`
	Shards     int     `json:"shards,omitempty"` // --partitions P/S: S claims buckets
	// Per node: the claims it holds (in the claims buckets it holds a
	// replica of), and its heap growth per claim of the fleet right after
	// writing and once idle.
	HeldClaims []uint64  `json:"held_claims"`
	FreshPer   []float64 `json:"fresh_heap_bytes_per_claim"`
	IdlePer    []float64 `json:"idle_heap_bytes_per_claim"`
	Error      string    `json:"error,omitempty"`
}

// heapAlloc is a node's Go heap after a collection: /debug/pprof/heap
// with gc=1 (collect first) and debug=1 (text, ending in runtime.MemStats).
func heapAlloc(ctx context.Context, pprofAddr string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pprofAddr+"/debug/pprof/heap?gc=1&debug=1", nil)
	if err != nil {
		return 0, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("heap profile: %s", res.Status)
	}
	return parseHeapAlloc(res.Body)
}

// parseHeapAlloc finds "# HeapAlloc = N" in a debug=1 heap profile.
func parseHeapAlloc(r io.Reader) (uint64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no HeapAlloc in the heap profile")
}

// fleetHeaps reads every node's heap.
func fleetHeaps(ctx context.Context, f *fleet) ([]uint64, error) {
	out := make([]uint64, len(f.nodes))
	for i, n := range f.nodes {
		h, err := heapAlloc(ctx, n.pprofAddr)
		if err != nil {
			return nil, fmt.Errorf("node%d: %w", i, err)
		}
		out[i] = h
	}
	return out, nil
}

// scaleMemory runs one memory row per --scale-memory-nodes.
func (b *bench) scaleMemory(ctx context.Context) ([]scaleMemRow, error) {
	bin, err := b.edgeBinary(ctx)
	if err != nil {
		return nil, err
	}
	var rows []scaleMemRow
	for _, spec := range b.o.scaleMemNodes {
		spec.Durability = b.o.scaleDurability
		r := b.scaleMemRow(ctx, spec, bin)
		rows = append(rows, r)
		if ctx.Err() != nil {
			return rows, ctx.Err()
		}
	}
	return rows, nil
}

func (b *bench) scaleMemRow(ctx context.Context, spec scaleSpec, bin string) scaleMemRow {
	r := scaleMemRow{Nodes: spec.Nodes, Replicas: spec.Replicas, Shards: spec.Shards}
	name := fmt.Sprintf("memory-%dn-r%d-s%d", spec.Nodes, spec.Replicas, spec.Shards)
	b.logf("scale %s: %d claims into %d nodes at R%d (no quota)", name, b.o.scaleClaims, spec.Nodes, spec.Replicas)
	f := &fleet{}
	defer func() {
		if err := f.stop(); err != nil && r.Error == "" {
			r.Error = err.Error()
		}
	}()
	fail := func(err error) scaleMemRow {
		r.Error = err.Error()
		b.logf("scale %s: %v", name, err)
		return r
	}
	var err error
	if r.Durability, _, err = b.startFleet(ctx, f, name, spec, bin, nil, true); err != nil {
		return fail(err)
	}
	partitions := b.o.partitions
	if spec.Shards > 1 {
		partitions = spec.partitionCount()
	}
	qnc, qc, err := connectQuota("nats://"+f.nodes[0].natsAddr, partitions, true)
	if err != nil {
		return fail(err)
	}
	defer qnc.Close()
	if err := waitPartitions(ctx, qc); err != nil {
		return fail(fmt.Errorf("partitions: %w", err))
	}
	js, err := jetstream.New(f.nc)
	if err != nil {
		return fail(err)
	}
	// The claims buckets' streams, and the nodes holding each: once the
	// shards have spread (placement.Balance: as many on each server).
	var info0 []*jetstream.StreamInfo
	for deadline := time.Now().Add(2 * time.Minute); ; sleep(ctx, time.Second) {
		if info0, err = claimsInfo(ctx, js, max(spec.Shards, 1)); err == nil {
			err = bucketsSpread(f, info0, spec)
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fail(fmt.Errorf("claims buckets: %w", err))
	}
	heap0, err := fleetHeaps(ctx, f)
	if err != nil {
		return fail(err)
	}

	// The claims: hit + claim, unique keys, 1,000 tenants, a pending TTL
	// longer than the row (72 h, the committed claims' default window),
	// 64 in flight.
	w := workload{Name: "memory", Tenants: 1000, Claim: true, IncrementUs: 1, CapacityUs: 1_000_000_000}
	prefix := keyPrefix()
	names := tenantNames(w.Tenants)
	var next, ok atomic.Uint64
	errs := &firstError{}
	t0 := time.Now()
	lastLog := t0
	total := uint64(b.o.scaleClaims)
	done := make(chan struct{})
	const inflight = 64
	for range inflight {
		go func() {
			defer func() { done <- struct{}{} }()
			for ctx.Err() == nil {
				seq := next.Add(1)
				if seq > total {
					return
				}
				tenant := names[seq%uint64(len(names))]
				id := prefix + strconv.FormatUint(seq, 36)
				hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				rep, err := qc.Hit(hctx, protocol.HitRequest{
					Charges: []protocol.Charge{{Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: w.IncrementUs, CapacityUs: w.CapacityUs}},
					Claim:   &protocol.ClaimRequest{Tenant: tenant, Source: "bench", Key: id, HookID: id, PendingTTLMs: (72 * time.Hour).Milliseconds()},
				})
				cancel()
				switch {
				case err != nil:
					errs.set(err)
				case rep.Result == protocol.ResultOK:
					ok.Add(1)
				default:
					errs.set(fmt.Errorf("hit %s: %s", id, rep.Result))
				}
			}
		}()
	}
	ticker := time.NewTicker(5 * time.Second)
	for left := inflight; left > 0; {
		select {
		case <-done:
			left--
		case <-ticker.C:
			if time.Since(lastLog) > 30*time.Second {
				lastLog = time.Now()
				b.logf("scale %s: %d of %d claims", name, ok.Load(), total)
			}
		}
	}
	ticker.Stop()
	r.WriteSec = time.Since(t0).Seconds()
	r.Written = ok.Load()
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	info1, err := claimsInfo(ctx, js, max(spec.Shards, 1))
	if err == nil {
		err = bucketsSpread(f, info1, spec) // nothing moved during the writes
	}
	if err != nil {
		return fail(fmt.Errorf("claims buckets: %w", err))
	}
	r.HeldClaims = make([]uint64, len(f.nodes))
	for k, info := range info1 {
		claims := info.State.Msgs - info0[k].State.Msgs
		r.Claims += claims
		for i, held := range holders(f, info) {
			if held {
				r.HeldClaims[i] += claims
			}
		}
	}
	if r.Claims < r.Written {
		return fail(fmt.Errorf("%d claims answered ok, %d in the claims buckets", r.Written, r.Claims))
	}
	heap1, err := fleetHeaps(ctx, f)
	if err != nil {
		return fail(err)
	}
	b.logf("scale %s: %d claims in %.0f s (first error: %s); waiting %s for the file stores' caches to expire", name, r.Claims, r.WriteSec, errs.String(), footprint.FilestoreIdle)
	sleep(ctx, footprint.FilestoreIdle)
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	heap2, err := fleetHeaps(ctx, f)
	if err != nil {
		return fail(err)
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(max(r.Claims, 1)) }
	for i := range f.nodes {
		r.FreshPer = append(r.FreshPer, per(heap1[i], heap0[i]))
		r.IdlePer = append(r.IdlePer, per(heap2[i], heap0[i]))
	}
	return r
}

// claimsInfo reads the streams of the claims buckets of a fleet of
// shards (shard k at index k).
func claimsInfo(ctx context.Context, js jetstream.JetStream, shards int) ([]*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []*jetstream.StreamInfo
	for k := range shards {
		name := kvstore.StreamName(protocol.ClaimsBucket(protocol.DefaultPrefix, k))
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, info)
	}
	return out, nil
}

// holders reports, per node, whether it holds a replica of the stream.
func holders(f *fleet, info *jetstream.StreamInfo) []bool {
	out := make([]bool, len(f.nodes))
	c := info.Cluster
	for i, n := range f.nodes {
		port := n.clusterAddr[strings.LastIndexByte(n.clusterAddr, ':')+1:]
		out[i] = len(f.nodes) == 1
		if c == nil {
			continue
		}
		out[i] = out[i] || strings.HasSuffix(c.Leader, "-"+port)
		for _, p := range c.Replicas {
			out[i] = out[i] || strings.HasSuffix(p.Name, "-"+port)
		}
	}
	return out
}

// bucketsSpread checks that the nodes hold as many claims buckets each
// (S·R/N, ±1) and that no bucket is moving.
func bucketsSpread(f *fleet, infos []*jetstream.StreamInfo, spec scaleSpec) error {
	held := make([]int, len(f.nodes))
	for _, info := range infos {
		if c := info.Cluster; c != nil && (c.Desired != nil || len(c.Replicas)+1 != spec.Replicas) {
			return fmt.Errorf("%s is moving", info.Config.Name)
		}
		for i, h := range holders(f, info) {
			if h {
				held[i]++
			}
		}
	}
	if slices.Max(held)-slices.Min(held) > 1 {
		return fmt.Errorf("claims buckets per node %v", held)
	}
	return nil
}

func printScaleMemory(w io.Writer, rows []scaleMemRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\n== scale memory: server heap per stored claim, per node (after a GC; idle: once the file stores dropped their caches) ==")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "nodes\treplicas\tshards\tdurability\tclaims\twritten in\tnode\tholds claims\tfresh B/claim\tidle B/claim\terror")
	for _, r := range rows {
		if len(r.HeldClaims) == 0 {
			fmt.Fprintf(tw, "%d\tR%d\t%d\t%s\t%d\t%.0f s\t—\t—\t—\t—\t%s\n", r.Nodes, r.Replicas, max(r.Shards, 1), r.Durability, r.Claims, r.WriteSec, r.Error)
			continue
		}
		for i, held := range r.HeldClaims {
			fresh, idle := "—", "—"
			if i < len(r.FreshPer) {
				fresh, idle = fmt.Sprintf("%.0f", r.FreshPer[i]), fmt.Sprintf("%.0f", r.IdlePer[i])
			}
			fmt.Fprintf(tw, "%d\tR%d\t%d\t%s\t%d\t%.0f s\tnode%d\t%d\t%s\t%s\t%s\n", r.Nodes, r.Replicas, max(r.Shards, 1), r.Durability, r.Claims, r.WriteSec, i, held, fresh, idle, r.Error)
		}
	}
	_ = tw.Flush()
}
