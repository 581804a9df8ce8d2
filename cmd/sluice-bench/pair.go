package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-dev/sluice/cmd/sluice-bench/internal/procstat"
	"github.com/sluice-dev/sluice/kvstore"
)

// contender is one system of a row: the process whose CPU is charged to it
// and the operation the load generator repeats.
type contender struct {
	system string
	server *child
	op     opFunc
	errs   *firstError
	seq    atomic.Uint64 // across the row's slices: claim keys stay unique
}

// sliceWarmup is the unmeasured ramp before every slice but the first (the
// first gets --warmup): connections and pools are warm by then.
const sliceWarmup = 250 * time.Millisecond

// measurePair measures the contenders of one row side by side: the row's
// --duration is cut into --slices slices, run in ABBA order (A B, B A,
// A B …) so that a change of the machine's background load hits both
// alike, and each contender's slices are summed into its row.
func (b *bench) measurePair(ctx context.Context, run int, name string, n int, cs []*contender) []row {
	type acc struct {
		res      loadResult
		srv, cli time.Duration
	}
	accs := make([]acc, len(cs))
	for i := range accs {
		accs[i].res.Hist = &hist{}
	}
	slices := b.o.slices
	slice := b.o.duration / time.Duration(slices)
	for s := 0; s < slices && ctx.Err() == nil; s++ {
		warm := b.o.warmup
		if s > 0 {
			warm = min(b.o.warmup, sliceWarmup)
		}
		for k := range cs {
			i := k
			if s%2 == 1 {
				i = len(cs) - 1 - k
			}
			c := cs[i]
			var s0, s1, c0, c1 time.Duration
			res := runLoad(ctx, n, warm, slice, &c.seq, c.op, window{
				start: func() { s0, _ = procstat.CPUTime(c.server.pid()); c0, _ = procstat.CPUTime(b.self) },
				end:   func() { s1, _ = procstat.CPUTime(c.server.pid()); c1, _ = procstat.CPUTime(b.self) },
			}, c.errs.String)
			a := &accs[i]
			a.res.add(res)
			a.srv += s1 - s0
			a.cli += c1 - c0
		}
	}
	rows := make([]row, len(cs))
	for i, c := range cs {
		rows[i] = newRow(run, name, n, c.system, accs[i].res, accs[i].srv, accs[i].cli)
		r := rows[i]
		b.logf("run %d %-9s in flight %3d %-6s %10.0f ops/s  p50 %s  p99 %s  errors %d", run, name, n, c.system,
			r.OpsPerSec, fmtUs(r.P50Us), fmtUs(r.P99Us), r.Outcomes["error"])
	}
	return rows
}

// add sums o into r (the slices of one row).
func (r *loadResult) add(o loadResult) {
	r.Ops += o.Ops
	r.Elapsed += o.Elapsed
	r.Hist.merge(o.Hist)
	for i, n := range o.Outcomes {
		r.Outcomes[i] += n
	}
	if r.FirstErr == "" {
		r.FirstErr = o.FirstErr
	}
}

// quotaPair measures one quota row: sluice (the default, coalescing
// client), sluice-json (one JSON request per hit, with --json-client) and
// Redis, interleaved. Each sluice variant is paired with the Redis row.
func (b *bench) quotaPair(ctx context.Context, run int, w workload, n int) []pair {
	cs := []*contender{{system: "sluice", server: b.edge.child, errs: &firstError{}}}
	cs[0].op = sluiceOp(b.qc.Hit, frameSettle(b.qc), w, keyPrefix(), cs[0].errs)
	if b.qcJSON != nil && !w.Settle {
		c := &contender{system: "sluice-json", server: b.edge.child, errs: &firstError{}}
		c.op = sluiceOp(b.qcJSON.Hit, nil, w, keyPrefix(), c.errs)
		cs = append(cs, c)
	}
	if w.Settle {
		// The same cycle as a NATS client of the service runs it: quota.hit,
		// then claims.settle, one JSON request each (the Go client).
		c := &contender{system: "sluice-client", server: b.edge.child, errs: &firstError{}}
		c.op = sluiceOp(b.cl.Hit, clientSettle(b.cl), w, keyPrefix(), c.errs)
		cs = append(cs, c)
	}
	if w.Durable && b.qcAcked != nil {
		// The same cycle on the edge without the barrier: what it costs.
		c := &contender{system: "sluice-acked", server: b.edgeAcked.child, errs: &firstError{}}
		c.op = sluiceOp(b.qcAcked.Hit, frameSettle(b.qcAcked), w, keyPrefix(), c.errs)
		cs = append(cs, c)
	}
	rdb, rsrv, rsys, rskip := b.rdb, b.redis, "redis", b.rskip
	if w.Durable {
		rdb, rsrv, rsys, rskip = b.rdbAOF, b.redisAOF, "redis-aof", b.aofSkip
	}
	if rdb != nil {
		c := &contender{system: rsys, server: rsrv, errs: &firstError{}}
		c.op = redisOp(rdb, w, keyPrefix(), c.errs)
		cs = append(cs, c)
	}
	s0, ok0 := sampleSync(ctx, b.edge.httpURL)
	rows := b.measurePair(ctx, run, w.Name, n, cs)
	if s1, ok1 := sampleSync(ctx, b.edge.httpURL); w.Durable && ok0 && ok1 {
		b.logf("run %d %s: %s", run, w.Name, syncLine(s0, s1))
	}
	redisRow := row{Run: run, Workload: w.Name, Inflight: n, System: rsys, Skipped: rskip}
	if rdb != nil {
		redisRow, rows = rows[len(rows)-1], rows[:len(rows)-1]
	}
	var out []pair
	for _, r := range rows {
		out = append(out, newPair(r, redisRow))
	}
	return out
}

// edgePair measures the edge row: the edge (durable default), the edge
// with --durability acked (no barrier) and the floor, interleaved. Pairs:
// each edge against the floor, and "edge-barrier": durable against acked
// (what the group sync costs).
func (b *bench) edgePair(ctx context.Context, run int) []pair {
	n := b.o.httpInflight
	client := httpClient(n)
	defer client.CloseIdleConnections()
	e := &contender{system: "edge", server: b.edge.child, errs: &firstError{}}
	e.op = hookOp(client, b.edge.httpURL, b.o.httpTenants, keyPrefix(), e.errs)
	a := &contender{system: "edge-acked", server: b.edgeAcked.child, errs: &firstError{}}
	a.op = hookOp(client, b.edgeAcked.httpURL, b.o.httpTenants, keyPrefix(), a.errs)
	f := &contender{system: "floor", server: b.floor, errs: &firstError{}}
	f.op = hookOp(client, b.floorU, b.o.httpTenants, keyPrefix(), f.errs)
	s0, ok0 := sampleSync(ctx, b.edge.httpURL)
	rows := b.measurePair(ctx, run, "edge", n, []*contender{e, a, f})
	if s1, ok1 := sampleSync(ctx, b.edge.httpURL); ok0 && ok1 {
		b.logf("run %d edge: %s", run, syncLine(s0, s1))
	}
	barrier := newPair(rows[0], rows[1])
	barrier.Workload = "edge-barrier"
	return []pair{newPair(rows[0], rows[2]), newPair(rows[1], rows[2]), barrier}
}

// drainResult is what expiring the pending claims of a hit+claim row cost:
// the claims were never settled, so each expires after the pending TTL
// (sluice: a KV expiry marker, removed a second later, seen by the expiry
// watcher, which publishes claim.expired; Redis: active expiry).
type drainResult struct {
	Run      int        `json:"run"`
	Workload string     `json:"workload"`
	Inflight int        `json:"inflight"`
	Sluice   drainCost  `json:"sluice"`
	Redis    *drainCost `json:"redis,omitempty"`
}

type drainCost struct {
	// Claims is how many more messages the claims stream (sluice) or keys
	// the database (Redis) held when the wait started than before the row
	// (the edge rows leave committed claims behind, with a 72 h TTL).
	Claims uint64 `json:"claims"`
	// Seconds until the stream / database was back to its size before the
	// row (or the wait gave up).
	Seconds float64 `json:"seconds"`
	Drained bool    `json:"drained"`
	// CPUPer1k is the server process's CPU seconds from the start of the
	// wait until it drained, per 1,000 claims.
	CPUPer1k float64 `json:"cpu_s_per_1k_claims"`
}

// storeSizes is the claims stream's message count and Redis's DBSIZE.
type storeSizes struct {
	msgs, keys func(ctx context.Context) (uint64, bool)
}

func (b *bench) storeSizes() storeSizes {
	var s storeSizes
	s.msgs = func(ctx context.Context) (uint64, bool) {
		js, err := jetstream.New(b.nc)
		if err != nil {
			return 0, false
		}
		stream, err := js.Stream(ctx, kvstore.StreamName(kvstore.BucketNames("sluice").Claims))
		if err != nil {
			return 0, false
		}
		info, err := stream.Info(ctx)
		if err != nil {
			return 0, false
		}
		return info.State.Msgs, true
	}
	s.keys = func(ctx context.Context) (uint64, bool) {
		if b.rdb == nil {
			return 0, false
		}
		v, err := b.rdb.DBSize(ctx).Result()
		return uint64(v), err == nil
	}
	return s
}

// baseline is what the stores held before a hit+claim row.
type baseline struct{ msgs, keys uint64 }

func (b *bench) storeBaseline(ctx context.Context) baseline {
	s := b.storeSizes()
	var bl baseline
	bl.msgs, _ = s.msgs(ctx)
	bl.keys, _ = s.keys(ctx)
	return bl
}

// drainClaims waits until the pending claims of the rows just measured have
// expired on both systems (the stores are back to their size before the
// row), so that their expiry is not charged to the next row, and reports
// what the expiry cost each server.
func (b *bench) drainClaims(ctx context.Context, run int, w workload, n int, before baseline) *drainResult {
	ctx, cancel := context.WithTimeout(ctx, pendingTTL+45*time.Second)
	defer cancel()
	sizes := b.storeSizes()
	msgs := func() (uint64, bool) {
		v, ok := sizes.msgs(ctx)
		return v - min(v, before.msgs), ok
	}
	dbsize := func() (uint64, bool) {
		v, ok := sizes.keys(ctx)
		return v - min(v, before.keys), ok
	}
	type waiter struct {
		cost  *drainCost
		pid   int
		count func() (uint64, bool)
		cpu0  time.Duration
	}
	res := &drainResult{Run: run, Workload: w.Name, Inflight: n}
	ws := []*waiter{{cost: &res.Sluice, pid: b.edge.pid(), count: msgs}}
	if b.rdb != nil {
		res.Redis = &drainCost{}
		ws = append(ws, &waiter{cost: res.Redis, pid: b.redis.pid(), count: dbsize})
	}
	t0 := time.Now()
	for _, w := range ws {
		w.cost.Claims, _ = w.count()
		w.cpu0, _ = procstat.CPUTime(w.pid)
	}
	b.logf("run %d waiting for %d sluice and %v redis pending claims to expire", run, res.Sluice.Claims, func() any {
		if res.Redis == nil {
			return "no"
		}
		return res.Redis.Claims
	}())
	left := len(ws)
	for left > 0 {
		for _, w := range ws {
			if w.cost.Drained || w.cost.Seconds > 0 {
				continue
			}
			if c, ok := w.count(); ok && c == 0 {
				cpu, _ := procstat.CPUTime(w.pid)
				w.cost.Drained = true
				w.cost.Seconds = time.Since(t0).Seconds()
				if w.cost.Claims > 0 {
					w.cost.CPUPer1k = (cpu - w.cpu0).Seconds() * 1000 / float64(w.cost.Claims)
				}
				left--
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			for _, w := range ws {
				if !w.cost.Drained {
					w.cost.Seconds = time.Since(t0).Seconds()
				}
			}
			b.logf("drain: gave up after %s", time.Since(t0).Round(time.Second))
			return res
		case <-time.After(100 * time.Millisecond):
		}
	}
	return res
}

func printDrains(w interface{ Write([]byte) (int, error) }, ds []*drainResult) {
	for _, d := range ds {
		if d == nil {
			continue
		}
		line := fmt.Sprintf("  expiry after %s/%d: sluice %d claims in %.1f s, %.4f CPU s/1k", d.Workload, d.Inflight,
			d.Sluice.Claims, d.Sluice.Seconds, d.Sluice.CPUPer1k)
		if d.Redis != nil {
			line += fmt.Sprintf("; redis %d keys in %.1f s, %.4f CPU s/1k", d.Redis.Claims, d.Redis.Seconds, d.Redis.CPUPer1k)
		}
		fmt.Fprintln(w, line)
	}
}
