package claims_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/claims"
	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/testkit"
)

// BenchmarkClaimFootprint stores b.N claims shaped like GitHub deliveries
// (1,000 tenants, source "github", a UUID-shaped key, a 22-byte hook id) in the
// default claims bucket on an in-process server with file storage, settles
// them with a 72 h TTL, and reports per stored claim: the growth of the Go
// heap (the server's in-memory indexes, TTL wheel and caches: this process
// runs the server) right away and once the server's caches of recent
// writes have expired (idle: what an old claim costs), the stream's bytes,
// and the store directory's bytes.
//
//	go test -run '^$' -bench ClaimFootprint -benchtime 100000x ./claims/
func BenchmarkClaimFootprint(b *testing.B) {
	k := testkit.New(b)
	ctx := context.Background()
	name := kvstore.BucketNames(protocol.DefaultPrefix).Claims
	s := newKV(b, k.Bucket(b, claims.BucketConfig(name, 1)))
	// Claims are made up on the fly, so the benchmark holds nothing per
	// claim itself and the heap's growth is the server's.
	nonce := uuid()
	claim := func(i int) (claims.ID, string) {
		sum := sha256.Sum256([]byte(nonce + strconv.Itoa(i)))
		h := hex.EncodeToString(sum[:])
		key := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		return claims.ID{Tenant: fmt.Sprintf("tenant-%04d", i%1000), Source: "github", Key: key}, h[32:54]
	}
	heap0 := testkit.LiveHeap()
	b.ResetTimer()
	testkit.InFlight(b, 64, func(i int) error {
		id, hook := claim(i)
		r, err := s.Claim(ctx, id, hook, 5*time.Minute)
		if err == nil {
			err = s.SettleOwn(ctx, id, hook, "", r.Revision, 72*time.Hour)
		}
		return err
	})
	st, err := k.JS.Stream(ctx, kvstore.StreamName(name))
	if err != nil {
		b.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if info.State.Msgs != uint64(b.N) {
		b.Fatalf("%d claims stored, want %d", info.State.Msgs, b.N)
	}
	id0, _ := claim(0)
	n := float64(b.N)
	b.ReportMetric((float64(testkit.LiveHeap())-float64(heap0))/n, "heap-B/claim")
	if b.N >= 1000 { // not on the calibration run
		// What an old claim costs: once the server has dropped a message
		// block's cache (10 s idle) and its per-block subject index (2
		// min). Server timers, no condition to poll: a plain wait.
		time.Sleep(testkit.FilestoreIdle)
		b.ReportMetric((float64(testkit.LiveHeap())-float64(heap0))/n, "idle-heap-B/claim")
		if *footprintHeap != "" {
			writeHeapProfile(b, *footprintHeap)
		}
	}
	b.ReportMetric(float64(info.State.Bytes)/n, "stream-B/claim")
	disk, err := testkit.DirBytes(k.Dir)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(disk)/n, "disk-B/claim")
	b.ReportMetric(float64(len(claims.KVKey(id0))), "key-B")
}

var footprintHeap = flag.String("footprint.heapprofile", "", "BenchmarkClaimFootprint: write the idle server's heap profile here")

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func uuid() string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	h := hex.EncodeToString(u[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
