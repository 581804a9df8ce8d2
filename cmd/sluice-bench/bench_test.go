package main

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

func TestHistExactBelowSubCount(t *testing.T) {
	var h hist
	for v := range 100 {
		h.record(time.Duration(v + 1)) // 1..100 ns
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.01, 1}, {0.5, 50}, {0.99, 99}, {0.999, 100}, {1, 100}} {
		if got := h.quantile(tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}

func TestHistRelativeError(t *testing.T) {
	for _, v := range []uint64{128, 129, 255, 256, 1000, 12345, 999_999, 1 << 40, math.MaxInt64} {
		i := bucketOf(v)
		hi := bucketHigh(i)
		if hi < v {
			t.Fatalf("bucketHigh(bucketOf(%d)) = %d < value", v, hi)
		}
		if i > 0 && bucketHigh(i-1) >= v {
			t.Fatalf("value %d also fits bucket %d (high %d)", v, i-1, bucketHigh(i-1))
		}
		if rel := float64(hi-v) / float64(v); rel > 1.0/subCount {
			t.Errorf("value %d: bucket high %d, relative error %.4f > 1/%d", v, hi, rel, subCount)
		}
	}
	if got := bucketOf(math.MaxUint64); got != histBuckets-1 {
		t.Errorf("bucketOf(MaxUint64) = %d, want the last bucket %d", got, histBuckets-1)
	}
}

func TestHistQuantilesAndMerge(t *testing.T) {
	var a, b hist
	// 990 fast ops at 100 µs, 9 at 5 ms, 1 at 80 ms.
	for range 990 {
		a.record(100 * time.Microsecond)
	}
	for range 9 {
		b.record(5 * time.Millisecond)
	}
	b.record(80 * time.Millisecond)
	a.merge(&b)
	if a.total != 1000 {
		t.Fatalf("total %d", a.total)
	}
	within := func(got, want time.Duration) bool {
		return got >= want && float64(got-want) <= float64(want)/subCount
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 100 * time.Microsecond}, {0.99, 100 * time.Microsecond}, {0.991, 5 * time.Millisecond}, {0.999, 5 * time.Millisecond}, {1, 80 * time.Millisecond}} {
		if got := a.quantile(tc.q); !within(got, tc.want) {
			t.Errorf("quantile(%v) = %v, want %v (+0.8%%)", tc.q, got, tc.want)
		}
	}
	if got := a.quantile(1); got != 80*time.Millisecond {
		t.Errorf("quantile(1) = %v, want the exact max", got)
	}
	var empty hist
	if empty.quantile(0.5) != 0 {
		t.Error("empty histogram: quantile != 0")
	}
}

func TestParseUsedMemory(t *testing.T) {
	v, err := parseUsedMemory("# Memory\r\nused_memory:1234567\r\nused_memory_human:1.18M\r\n")
	if err != nil || v != 1234567 {
		t.Fatalf("parseUsedMemory = %d, %v", v, err)
	}
	if _, err := parseUsedMemory("# Memory\r\n"); err == nil {
		t.Fatal("no used_memory: want an error")
	}
}

func TestSpreadAndRatios(t *testing.T) {
	s := spreadOf([]float64{3, 1, math.NaN(), 2})
	if s.Min != 1 || s.Median != 2 || s.Max != 3 || s.N != 3 {
		t.Fatalf("spreadOf = %+v", s)
	}
	if s := spreadOf([]float64{4, 1}); s.Median != 2.5 {
		t.Fatalf("even median = %v", s.Median)
	}
	a := row{Ops: 10, OpsPerSec: 200, P99Us: 50, P50Us: 10, P999Us: 80, ServerCPUPer1k: 0.1}
	b := row{Ops: 10, OpsPerSec: 100, P99Us: 100, P50Us: 10, P999Us: 40, ServerCPUPer1k: 0.2}
	r := ratioOf(a, b)
	if r.OpsPerSec != 2 || r.P99 != 0.5 || r.P999 != 2 || r.ServerCPU != 0.5 {
		t.Fatalf("ratioOf = %+v", r)
	}
	b.Skipped = "absent"
	if ratioOf(a, b) != nil {
		t.Fatal("a skipped row has no ratio")
	}
}

// TestLuaScripts checks the Redis side's semantics against a real
// redis-server: GCRA decisions as PROTOCOL.md states them, all-or-nothing
// charges, nothing written when denied, and the claim outcomes with no
// charge spent when the claim is taken.
func TestLuaScripts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, addr, err := startRedis(ctx, t.TempDir(), false)
	switch {
	case err == errRedisAbsent && os.Getenv("CI") != "":
		// CI installs redis-server (.ci/run): there a missing server is a
		// failure.
		t.Fatal("redis-server is not installed; .ci/run should have installed it (apt-get install -y redis-server)")
	case err == errRedisAbsent:
		// Without redis-server the scripts still run, on miniredis (an
		// in-process Redis whose EVAL runs Lua 5.1 as Redis does).
		t.Log("redis-server is not installed: checking the Lua scripts on miniredis (apt-get install -y redis-server checks them on Redis itself)")
		mr := miniredis.RunT(t)
		addr = mr.Addr()
	case err != nil:
		t.Fatal(err)
	default:
		defer srv.stop(5 * time.Second)
	}
	rdb := newRedisClient(addr, 2)
	defer rdb.Close()

	const sec = int64(time.Second / time.Microsecond)
	// 3 per 30 s: increment 10 s, capacity 30 s. The steps below take far
	// less than 10 s, so the bucket does not refill between them.
	lim := func(key string) []redisCharge {
		return []redisCharge{{Key: key, IncrementUs: 10 * sec, CapacityUs: 30 * sec}}
	}
	hit := func(charges []redisCharge, claim, hook string) redisReply {
		t.Helper()
		r, err := redisHit(ctx, rdb, charges, claim, hook, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	tat := func(key string) string {
		v, err := rdb.Get(ctx, key).Result()
		if err == redis.Nil {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	t.Run("burst then denied", func(t *testing.T) {
		for i, wantRemaining := range []int64{2, 1, 0} {
			r := hit(lim("b1"), "", "")
			if r.Result != "ok" || r.Remaining != wantRemaining {
				t.Fatalf("charge %d: %+v, want ok with remaining %d", i, r, wantRemaining)
			}
		}
		before := tat("b1")
		r := hit(lim("b1"), "", "")
		if r.Result != "rate_limited" || r.RetryAfterMs < 9_000 || r.RetryAfterMs > 10_000 {
			t.Fatalf("4th charge: %+v, want rate_limited with retry ~10 s", r)
		}
		if after := tat("b1"); after != before {
			t.Fatalf("a denied charge wrote the TAT: %s -> %s", before, after)
		}
		ttl, err := rdb.PTTL(ctx, "b1").Result()
		if err != nil || ttl <= 25*time.Second || ttl > 30*time.Second {
			t.Fatalf("bucket TTL %v (%v), want about the 30 s until it is full again", ttl, err)
		}
		if strings.ContainsAny(before, ".e") {
			t.Fatalf("TAT %q is not an integer of microseconds", before)
		}
	})

	t.Run("all or nothing", func(t *testing.T) {
		full := []redisCharge{{Key: "aon-a", IncrementUs: sec, CapacityUs: sec}}
		if r := hit(full, "", ""); r.Result != "ok" {
			t.Fatal(r)
		}
		// aon-a is now empty: a hit on (aon-b, aon-a) is denied and aon-b untouched.
		both := []redisCharge{{Key: "aon-b", IncrementUs: sec, CapacityUs: 10 * sec}, full[0]}
		if r := hit(both, "", ""); r.Result != "rate_limited" {
			t.Fatalf("%+v, want rate_limited", r)
		}
		if v := tat("aon-b"); v != "" {
			t.Fatalf("the admitted charge of a denied hit was written: %q", v)
		}
	})

	t.Run("claims", func(t *testing.T) {
		r := hit(lim("c1"), "claim:k1", "hook-1")
		if r.Result != "ok" || r.HookID != "hook-1" {
			t.Fatalf("first claim: %+v", r)
		}
		spent := tat("c1")
		r = hit(lim("c1"), "claim:k1", "hook-2")
		if r.Result != "pending" || r.HookID != "hook-1" || r.RetryAfterMs < 29_000 || r.RetryAfterMs > 30_000 {
			t.Fatalf("claim pending for another hook: %+v, want pending hook-1 retry ~30 s", r)
		}
		if got := tat("c1"); got != spent {
			t.Fatalf("a pending outcome spent a charge: %s -> %s", spent, got)
		}
		r = hit(lim("c1"), "claim:k1", "hook-1")
		if r.Result != "ok" || r.HookID != "hook-1" {
			t.Fatalf("retry by the holder: %+v, want ok (idempotent)", r)
		}
		// Settle, as the edge does after storing the hook.
		if err := rdb.Set(ctx, "claim:k1", "c:hook-1", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		spent = tat("c1")
		r = hit(lim("c1"), "claim:k1", "hook-3")
		if r.Result != "duplicate" || r.HookID != "hook-1" {
			t.Fatalf("committed claim: %+v, want duplicate of hook-1", r)
		}
		if got := tat("c1"); got != spent {
			t.Fatalf("a duplicate spent a charge: %s -> %s", spent, got)
		}
		// Two charges were spent (the first claim and the holder's retry):
		// one more empties c1, and then a rate-limited hit takes no claim.
		if r := hit(lim("c1"), "", ""); r.Result != "ok" || r.Remaining != 0 {
			t.Fatalf("third charge: %+v, want ok with remaining 0", r)
		}
		r = hit(lim("c1"), "claim:k2", "hook-4")
		if r.Result != "rate_limited" {
			t.Fatalf("%+v, want rate_limited", r)
		}
		if n, err := rdb.Exists(ctx, "claim:k2").Result(); err != nil || n != 0 {
			t.Fatalf("a rate-limited hit took its claim (%d, %v)", n, err)
		}
	})
}

// TestBucketMemory: the memory row's owner holds its idle buckets, and
// each costs tens of bytes (the owner's figure with a million tenants is
// under 64 bytes; a smaller fill pays more for the map's growth steps).
func TestBucketMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	got, err := bucketMemory(ctx, 50_000)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bytes/bucket: %v", got)
	for _, row := range []string{"hooks", "hooks+bytes"} {
		if v, ok := got[row]; !ok || v < 16 || v > 200 {
			t.Errorf("%s: %.1f bytes/bucket (have %v), want 16..200", row, v, got)
		}
	}
}
