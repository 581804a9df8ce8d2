package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/internal/footprint"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/natsembed"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
	"github.com/sluice-dev/sluice/quota/owner"
)

// memoryResult holds the memory figures.
type memoryResult struct {
	// Per idle GCRA bucket in a partition owner (bucketMemory): row ->
	// bytes/bucket.
	BucketBytes map[string]float64 `json:"bucket_bytes,omitempty"`
	BucketError string             `json:"bucket_error,omitempty"`
	// Per stored claim in the JetStream KV claims bucket.
	Claims      *claimsMemory `json:"claims,omitempty"`
	ClaimsError string        `json:"claims_error,omitempty"`
	// The same data in Redis (INFO memory used_memory growth per key).
	Redis        *redisMemory `json:"redis,omitempty"`
	RedisSkipped string       `json:"redis_skipped,omitempty"`
}

type claimsMemory struct {
	Claims int `json:"claims"`
	// Pending: after Claim; committed: after Settle (History 1: the pending
	// record is replaced).
	PendingStreamBytesPer   float64 `json:"pending_stream_bytes_per_claim"`
	CommittedStreamBytesPer float64 `json:"committed_stream_bytes_per_claim"`
	CommittedMsgs           uint64  `json:"committed_msgs"`
	// Bytes of the store directory (message blocks, indexes, deleted
	// records not yet compacted) per claim, after settling.
	StoreDirBytesPer float64 `json:"store_dir_bytes_per_claim"`
	// Growth of the Go heap of this process (which runs the nats-server)
	// per committed claim, after a GC: the server's in-memory per-subject
	// index and caches, comparable to Redis's used_memory. Indicative: it
	// also holds whatever the server caches at that moment.
	ServerHeapBytesPer float64 `json:"server_heap_bytes_per_claim"`
	// The same once the server has dropped its caches of those writes
	// (footprint.FilestoreIdle later): what an old claim costs, the figure
	// to compare with Redis's bytes per key.
	ServerIdleHeapBytesPer float64 `json:"server_idle_heap_bytes_per_claim"`
	KeyExample             string  `json:"key_example"`
}

type redisMemory struct {
	BucketKeys          int     `json:"bucket_keys"`
	BytesPerBucket      float64 `json:"bytes_per_bucket"`
	ClaimKeys           int     `json:"claim_keys"`
	BytesPerClaim       float64 `json:"bytes_per_claim"`
	BucketKeyExample    string  `json:"bucket_key_example"`
	ClaimKeyExample     string  `json:"claim_key_example"`
	UsedMemoryBaseBytes int64   `json:"used_memory_base_bytes"`
}

// idleTenants is how many tenants the memory row's bucketMemory fills one
// partition owner's state with.
const idleTenants = 1_000_000

// bucketMemory measures the heap one partition owner holds per idle GCRA
// bucket, through the owner's public face: an owner of one partition on an
// in-memory embedded server, a Client made WithLocalOwner (the in-process
// path: nothing of a hit outlives it but the owner's state), tenants
// tenants charged once each for every kind of the row, and the live heap
// after a GC compared with the one before. The charges take an hour of a
// burst of a thousand: no bucket is full, so nothing sweeps one. Rows:
// "hooks" (one bucket per tenant), "hooks+bytes" (the edge's two).
func bucketMemory(ctx context.Context, tenants int) (map[string]float64, error) {
	res := map[string]float64{}
	for _, row := range []struct {
		name  string
		kinds []string
	}{
		{"hooks", []string{protocol.KindHooks}},
		{"hooks+bytes", []string{protocol.KindHooks, protocol.KindBytes}},
	} {
		per, err := idleBucketBytes(ctx, row.kinds, tenants)
		if err != nil {
			return res, fmt.Errorf("%s: %w", row.name, err)
		}
		res[row.name] = per
	}
	return res, nil
}

func idleBucketBytes(ctx context.Context, kinds []string, tenants int) (float64, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-buckets-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: filepath.Join(dir, "jetstream"), Listen: "off"})
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	const prefix = "bucketmem"
	leases, counts, err := quota.OpenBuckets(ctx, js, prefix, 1)
	if err != nil {
		return 0, err
	}
	store, err := claims.NewMemory()
	if err != nil {
		return 0, err
	}
	routing := []quota.WorkerRouterOption{quota.WithPrefix(prefix), quota.WithPartitions(1)}
	w, err := owner.New(nc, leases, counts, store, routing[0], routing[1])
	if err != nil {
		return 0, err
	}
	if err := w.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	c, err := quota.NewRouter(nc, routing[0], routing[1], quota.WithLocalOwner(w), quota.WithCoalescing(false))
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(w.Partitions()) == 0 {
		select {
		case <-wctx.Done():
			return 0, fmt.Errorf("the owner took no lease: %w", wctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	inc := int64(time.Hour / time.Microsecond)
	r := protocol.HitRequest{Charges: make([]protocol.Charge, len(kinds))}
	heap0 := footprint.LiveHeap()
	for i := range tenants {
		tenant := "tenant-" + strconv.Itoa(i)
		for k, kind := range kinds {
			r.Charges[k] = protocol.Charge{Kind: kind, Tenant: tenant, IncrementUs: inc, CapacityUs: 1000 * inc}
		}
		rep, err := c.Hit(ctx, r)
		switch {
		case err != nil:
			return 0, err
		case rep.Result != protocol.ResultOK:
			return 0, fmt.Errorf("hit %d: %s", i, rep.Result)
		}
	}
	heap1 := footprint.LiveHeap()
	if len(w.Partitions()) != 1 {
		return 0, errors.New("the owner lost its lease during the measurement")
	}
	return (float64(heap1) - float64(heap0)) / float64(tenants*len(kinds)), nil
}

// claimShape returns the i-th claim of the memory measurement: tenants like
// the benchmark's, a GitHub-style source and delivery id (a UUID), a NUID
// hook id.
func claimShape(i int) (claims.ID, string) {
	return claims.ID{Tenant: fmt.Sprintf("tenant-%04d", i%1000), Source: "github", Key: uuidString()}, nuid.Next()
}

// claimsStoreMemory stores n claims (64 in flight) in a claims bucket on
// an embedded server (file storage, as the edge), settles them, and
// reports the stream's bytes per claim and the store directory's size.
func claimsStoreMemory(ctx context.Context, dir string, n int) (*claimsMemory, error) {
	storeDir := filepath.Join(dir, "jetstream")
	srv, err := natsembed.StartServer(natsembed.ServerConfig{StoreDir: storeDir, Listen: "off"})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	name := kvstore.BucketNames(protocol.DefaultPrefix).Claims
	b, err := kvstore.OpenBucket(ctx, js, claims.BucketConfig(name, 0))
	if err != nil {
		return nil, err
	}
	store, err := claims.NewKV(b)
	if err != nil {
		return nil, err
	}
	heap0 := footprint.LiveHeap()
	type held struct {
		id   claims.ID
		hook string
		rev  uint64
	}
	all := make([]held, n)
	for i := range all {
		all[i].id, all[i].hook = claimShape(i)
	}
	each := func(fn func(h *held) error) error {
		var wg sync.WaitGroup
		var once sync.Once
		var first error
		next := make(chan int)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := fn(&all[i]); err != nil {
						once.Do(func() { first = err })
					}
				}
			}()
		}
		for i := range all {
			if ctx.Err() != nil {
				break
			}
			next <- i
		}
		close(next)
		wg.Wait()
		if first == nil {
			first = ctx.Err()
		}
		return first
	}
	call := func(fn func(ctx context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return fn(cctx)
	}
	if err := each(func(h *held) error {
		return call(func(ctx context.Context) error {
			res, err := store.Claim(ctx, h.id, h.hook, pendingTTL*10)
			if err == nil && res.Outcome != claims.OK {
				err = fmt.Errorf("claim %v: outcome %v", h.id, res.Outcome)
			}
			h.rev = res.Revision
			return err
		})
	}); err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, kvstore.StreamName(name))
	if err != nil {
		return nil, err
	}
	pending, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if err := each(func(h *held) error {
		return call(func(ctx context.Context) error { return store.Settle(ctx, h.id, h.hook, h.rev, 72*time.Hour) })
	}); err != nil {
		return nil, err
	}
	committed, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	keep := all[0].id
	all = nil // the bench's own bookkeeping is not the server's memory
	heap1 := footprint.LiveHeap()
	size, err := footprint.DirBytes(filepath.Join(storeDir, "jetstream"))
	if err != nil {
		size, err = footprint.DirBytes(storeDir)
		if err != nil {
			return nil, err
		}
	}
	// An old claim's cost: wait out the file store's caches of the writes
	// just made.
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(footprint.FilestoreIdle):
	}
	heap2 := footprint.LiveHeap()
	m := &claimsMemory{
		Claims:                  n,
		PendingStreamBytesPer:   float64(pending.State.Bytes) / float64(max(pending.State.Msgs, 1)),
		CommittedStreamBytesPer: float64(committed.State.Bytes) / float64(max(committed.State.Msgs, 1)),
		CommittedMsgs:           committed.State.Msgs,
		StoreDirBytesPer:        float64(size) / float64(n),
		ServerHeapBytesPer:      (float64(heap1) - float64(heap0)) / float64(n),
		ServerIdleHeapBytesPer:  (float64(heap2) - float64(heap0)) / float64(n),
		KeyExample:              claims.KVKey(keep),
	}
	return m, nil
}

// uuidString returns a random RFC 4122 version 4 UUID in its 36-byte text
// form (the shape of X-GitHub-Delivery).
func uuidString() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// redisStoreMemory measures Redis's used_memory growth per GCRA bucket key
// (as scriptGCRA writes them: TAT string with PX) and per claim key (as
// scriptHit + a settle write them). It flushes the database first: run it
// on the bench's own throwaway server only.
func redisStoreMemory(ctx context.Context, rdb *redis.Client, buckets, nclaims int) (*redisMemory, error) {
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	base, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	tat := strconv.FormatInt(time.Now().UnixMicro()+int64(time.Hour/time.Microsecond), 10)
	bucketKey := func(i int) string { return fmt.Sprintf("rate:hooks:tenant-%07d", i) }
	if err := pipelined(ctx, rdb, buckets, func(p redis.Pipeliner, i int) {
		p.Set(ctx, bucketKey(i), tat, time.Hour)
	}); err != nil {
		return nil, err
	}
	afterBuckets, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	// Claims on their own: with the buckets still there, the main hash
	// table's doubling (2^20 -> 2^21 slots) would be charged to the claims.
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	claimsBase, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	var example string
	if err := pipelined(ctx, rdb, nclaims, func(p redis.Pipeliner, i int) {
		id, hook := claimShape(i)
		k := "claim:" + id.Tenant + ":" + id.Source + ":" + id.Key
		if i == 0 {
			example = k
		}
		p.Set(ctx, k, "c:"+hook, 72*time.Hour)
	}); err != nil {
		return nil, err
	}
	afterClaims, err := usedMemory(ctx, rdb)
	if err != nil {
		return nil, err
	}
	_ = rdb.FlushAll(ctx).Err()
	return &redisMemory{
		BucketKeys:          buckets,
		BytesPerBucket:      float64(afterBuckets-base) / float64(buckets),
		ClaimKeys:           nclaims,
		BytesPerClaim:       float64(afterClaims-claimsBase) / float64(nclaims),
		BucketKeyExample:    bucketKey(0),
		ClaimKeyExample:     example,
		UsedMemoryBaseBytes: base,
	}, nil
}

func pipelined(ctx context.Context, rdb *redis.Client, n int, add func(p redis.Pipeliner, i int)) error {
	const batch = 1000
	for i := 0; i < n; i += batch {
		p := rdb.Pipeline()
		for j := i; j < min(i+batch, n); j++ {
			add(p, j)
		}
		if _, err := p.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

func usedMemory(ctx context.Context, rdb *redis.Client) (int64, error) {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	return parseUsedMemory(s)
}

// parseUsedMemory extracts used_memory from INFO memory output.
func parseUsedMemory(info string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}
