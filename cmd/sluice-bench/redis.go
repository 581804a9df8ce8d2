package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The Redis side of the comparison: GCRA in one Lua script (the algorithm
// of go-redis/redis_rate's allowN, itself from rwz/redis-gcra), and GCRA +
// a pending dedupe claim (SET NX PX) in one Lua script, with the semantics
// of sluice's quota.hit (PROTOCOL.md):
//
//   - state per bucket = TAT; new_tat = max(tat, now) + increment,
//     allow_at = new_tat - capacity, denied iff now < allow_at,
//     retry_after_ms = max(1, ceil((allow_at - now) / 1 ms)); a bucket with
//     no state is full;
//   - all charges or none; a denied hit writes nothing;
//   - a taken claim spends no charge (sluice refunds; here nothing is
//     written): committed -> duplicate + the original hook id, pending ->
//     pending + retry_after = the claim's remaining TTL; a claim pending for
//     the same hook id is ok (an idempotent retry).
//
// Differences from redis_rate, all in favour of exactness and none in
// favour of speed: time is integer microseconds since the Unix epoch from
// TIME (2^53 µs is year 2255, so doubles hold it exactly) instead of float
// seconds since 2017; the comparison is strict (redis_rate rounds
// `remaining` half up, admitting up to half an emission interval early);
// increment and capacity arrive precomputed in µs, as on sluice's wire
// (redis_rate derives them from rate, burst and period in the script); the
// TTL of a bucket is PX ceil(reset_after) in ms rather than EX in seconds.
// redis_rate's redis.replicate_commands() is the default since Redis 5 and
// a no-op (deprecated) in Redis 7; it is called only where it exists.

// luaGCRA computes the decisions of n charges. Inputs: ARGV[1] = n,
// KEYS[1..n] the buckets, ARGV[2i], ARGV[2i+1] = increment_us,
// capacity_us of KEYS[i]. Outputs: now, n, new (new TATs), wait (µs until
// every charge fits; 0: allowed), remaining, reset (µs).
//
//go:embed lua/gcra.lua
var luaGCRA string

// scriptGCRA: charges only. Reply {"ok", 0, remaining, reset_ms} or
// {"rate_limited", retry_after_ms, 0, reset_ms}.
//
//go:embed lua/charges.lua
var luaCharges string

var scriptGCRA = redis.NewScript(luaGCRA + luaCharges)

// scriptHit: charges + a pending claim. KEYS[n+1] is the claim;
// ARGV[2n+2] the hook id, ARGV[2n+3] the pending TTL in ms. Reply
// {result, retry_after_ms, remaining, reset_ms, hook_id}. Claim values are
// "p:<hook id>" (pending) and "c:<hook id>" (committed, written by settle).
//
//go:embed lua/hit.lua
var luaHit string

var scriptHit = redis.NewScript(luaGCRA + luaHit)

// redisCharge is one GCRA charge against a Redis bucket key.
type redisCharge struct {
	Key         string
	IncrementUs int64
	CapacityUs  int64
}

// redisReply is the decoded reply of scriptGCRA / scriptHit.
type redisReply struct {
	Result       string
	RetryAfterMs int64
	Remaining    int64
	ResetMs      int64
	HookID       string
}

// redisHit runs one hit: the charges and, when claimKey is not empty, a
// pending claim for hookID with pendingTTL.
func redisHit(ctx context.Context, rdb redis.Scripter, charges []redisCharge, claimKey, hookID string, pendingTTL time.Duration) (redisReply, error) {
	keys := make([]string, 0, len(charges)+1)
	args := make([]any, 0, 2*len(charges)+3)
	args = append(args, len(charges))
	for _, c := range charges {
		keys = append(keys, c.Key)
		args = append(args, c.IncrementUs, c.CapacityUs)
	}
	s := scriptGCRA
	if claimKey != "" {
		s = scriptHit
		keys = append(keys, claimKey)
		args = append(args, hookID, max(1, pendingTTL.Milliseconds()))
	}
	v, err := s.Run(ctx, rdb, keys, args...).Slice()
	if err != nil {
		return redisReply{}, err
	}
	return decodeRedisReply(v)
}

func decodeRedisReply(v []any) (redisReply, error) {
	if len(v) < 4 {
		return redisReply{}, fmt.Errorf("redis: reply %v: want at least 4 elements", v)
	}
	var r redisReply
	var ok bool
	if r.Result, ok = v[0].(string); !ok {
		return redisReply{}, fmt.Errorf("redis: reply %v: result is %T", v, v[0])
	}
	ints := []*int64{&r.RetryAfterMs, &r.Remaining, &r.ResetMs}
	for i, p := range ints {
		n, ok := v[i+1].(int64)
		if !ok {
			return redisReply{}, fmt.Errorf("redis: reply %v: element %d is %T", v, i+1, v[i+1])
		}
		*p = n
	}
	if len(v) > 4 {
		r.HookID, _ = v[4].(string)
	}
	return r, nil
}

// errRedisAbsent: redis-server is not installed; the Redis rows are skipped.
var errRedisAbsent = errors.New("redis-server not found in PATH (install: apt-get update && apt-get install -y redis-server)")

// startRedis starts a throwaway redis-server on a free loopback port with
// persistence off, working in dir; durable: with the append-only file
// fsynced before every reply (appendonly yes, appendfsync always).
func startRedis(ctx context.Context, dir string, durable bool) (*child, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", errRedisAbsent
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	persist := []string{"--appendonly", "no"}
	if durable {
		persist = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	c, err := startChild("redis-server", bin, append([]string{
		"--save", "", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--daemonize", "no", "--logfile", "",
	}, persist...), nil)
	if err != nil {
		return nil, "", err
	}
	if err := c.waitTCP(ctx, addr); err != nil {
		c.stop(5 * time.Second)
		return nil, "", err
	}
	return c, addr, nil
}

// startRedisRow starts the redis-server of a row in dir (made if need be;
// durable as for startRedis) and a client of it with poolSize connections,
// its scripts loaded. The error is why the row is skipped.
func startRedisRow(ctx context.Context, dir string, durable bool, poolSize int) (*child, string, *redis.Client, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", nil, err
	}
	c, addr, err := startRedis(ctx, dir, durable)
	if err != nil {
		return nil, "", nil, err
	}
	rdb := newRedisClient(addr, poolSize)
	if err := warmRedis(ctx, rdb); err != nil {
		_ = rdb.Close()
		c.stop(5 * time.Second)
		return nil, "", nil, err
	}
	return c, addr, rdb, nil
}

// newRedisClient returns a go-redis client for addr with a pool of at least
// poolSize connections (one per request in flight: go-redis does not
// multiplex concurrent calls on a connection).
func newRedisClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		PoolSize:                 poolSize,
		MinIdleConns:             poolSize,
		ReadTimeout:              5 * time.Second,
		WriteTimeout:             5 * time.Second,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}
