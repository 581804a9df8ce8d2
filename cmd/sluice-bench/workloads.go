package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-dev/sluice/client"
	"github.com/sluice-dev/sluice/protocol"
	"github.com/sluice-dev/sluice/quota"
)

// workload is one row family of the quota comparison. Both systems get the
// same tenants, limits and keys.
type workload struct {
	Name    string
	Tenants int  // round robin over "tenant-%04d"
	Claim   bool // a pending dedupe claim with a unique key per hit
	// Settle commits the claim after the hit (the claim cycle: sluice's
	// claims.settle, Redis's SET … XX PX), and Durable compares with a
	// Redis that fsyncs every write (appendonly yes, appendfsync always):
	// both answer only once the write is on disk.
	Settle, Durable bool
	// One charge per hit (kind "hooks"), in PROTOCOL.md units.
	IncrementUs int64
	CapacityUs  int64
	Doc         string
}

// opTimeout bounds one operation on either system: long enough that an
// overloaded 2-core machine slows rows down rather than failing them.
const opTimeout = 2 * time.Second

// pendingTTL of the claims of the hit+claim workload, on both systems. It
// is longer than sluice's 30 s default so that no claim of a row expires
// while the row (all its contenders' slices) still runs: expiry is
// measured on its own afterwards (--drain), not charged to whoever runs
// when it happens. The TTL does not change the cost of a hit.
const pendingTTL = 60 * time.Second

var allWorkloads = []workload{
	{
		Name: "decisions", Tenants: 1000, IncrementUs: 1000, CapacityUs: 1_000_000,
		Doc: "charges only; 1,000 tenants round robin; 1,000/s burst 1,000 each (all pass)",
	},
	{
		Name: "hit+claim", Tenants: 1000, Claim: true, IncrementUs: 1000, CapacityUs: 1_000_000,
		Doc: "one charge + a pending claim on a unique key (KV create / SET NX PX)",
	},
	{
		Name: "cycle-durable", Tenants: 1000, Claim: true, Settle: true, Durable: true, IncrementUs: 1000, CapacityUs: 1_000_000,
		Doc: "the durable claim cycle: hit + claim, then the settle, each answered once on disk (sluice: quota.hit, then the settle in a batch frame to the owner, behind the group sync — sluice-client: quota.hit and claims.settle through the service, as a NATS client runs them; Redis appendfsync always: the Lua hit + claim, then SET … XX PX)",
	},
	{
		Name: "hot", Tenants: 1, IncrementUs: 5, CapacityUs: 1_000_000,
		Doc: "charges only; one tenant takes all the load; 200,000/s burst 200,000",
	},
}

func workloadByName(name string) (workload, bool) {
	for _, w := range allWorkloads {
		if w.Name == name {
			return w, true
		}
	}
	return workload{}, false
}

func tenantNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tenant-%04d", i)
	}
	return out
}

// settler commits the claim of a cycle's hit.
type settler func(ctx context.Context, tenant, key, hookID string, rev uint64) error

// frameSettle settles through the quota Router: in a batch frame to the
// partition owner, with the hits.
func frameSettle(c *quota.Router) settler {
	return func(ctx context.Context, tenant, key, hookID string, rev uint64) error {
		return c.Settle(ctx, protocol.SettleRequest{Tenant: tenant, Source: "bench", Key: key, HookID: hookID, Revision: rev, TTLMs: pendingTTL.Milliseconds()})
	}
}

// clientSettle settles through the service's claims.settle (one JSON
// request per settle, as any language's client).
func clientSettle(cl *client.Client) settler {
	return func(ctx context.Context, tenant, key, hookID string, rev uint64) error {
		return cl.SettleTTL(ctx, tenant, "bench", key, hookID, rev, pendingTTL)
	}
}

// hitter takes a hit: quota.Router.Hit (a frame to the owner) or
// client.Client.Hit (the service's quota.hit, one JSON request).
type hitter func(ctx context.Context, r protocol.HitRequest) (protocol.HitReply, error)

// sluiceOp hits with hit (TCP loopback), and with w.Settle settles the
// claim with settle.
func sluiceOp(hit hitter, settle settler, w workload, keyPrefix string, errs *firstError) opFunc {
	names := tenantNames(w.Tenants)
	return func(ctx context.Context, seq uint64) outcome {
		tenant := names[seq%uint64(len(names))]
		r := protocol.HitRequest{Charges: []protocol.Charge{{
			Kind: protocol.KindHooks, Tenant: tenant, IncrementUs: w.IncrementUs, CapacityUs: w.CapacityUs,
		}}}
		if w.Claim {
			id := keyPrefix + strconv.FormatUint(seq, 36)
			r.Claim = &protocol.ClaimRequest{
				Tenant: tenant, Source: "bench", Key: id, HookID: id,
				PendingTTLMs: pendingTTL.Milliseconds(),
			}
		}
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		rep, err := hit(ctx, r)
		if err == nil && w.Settle && rep.Result == protocol.ResultOK {
			err = settle(ctx, tenant, r.Claim.Key, r.Claim.HookID, rep.Revision)
		}
		if err != nil {
			errs.set(err)
			return outError
		}
		return resultOutcome(rep.Result)
	}
}

// redisOp runs the same hit as one Lua script call.
func redisOp(rdb *redis.Client, w workload, keyPrefix string, errs *firstError) opFunc {
	names := tenantNames(w.Tenants)
	buckets := make([]string, len(names))
	for i, n := range names {
		buckets[i] = "rate:" + protocol.KindHooks + ":" + n
	}
	return func(ctx context.Context, seq uint64) outcome {
		i := seq % uint64(len(names))
		charges := []redisCharge{{Key: buckets[i], IncrementUs: w.IncrementUs, CapacityUs: w.CapacityUs}}
		var claimKey, hook string
		if w.Claim {
			hook = keyPrefix + strconv.FormatUint(seq, 36)
			claimKey = "claim:" + names[i] + ":bench:" + hook
		}
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		rep, err := redisHit(ctx, rdb, charges, claimKey, hook, pendingTTL)
		if err == nil && w.Settle && rep.Result == protocol.ResultOK {
			// The commit: the pending claim becomes the committed one.
			err = rdb.Do(ctx, "SET", claimKey, "c:"+hook, "XX", "PX", pendingTTL.Milliseconds()).Err()
		}
		if err != nil {
			errs.set(err)
			return outError
		}
		return resultOutcome(rep.Result)
	}
}

func resultOutcome(result string) outcome {
	switch result {
	case protocol.ResultOK:
		return outOK
	case protocol.ResultRateLimited:
		return outLimited
	case protocol.ResultDuplicate:
		return outDuplicate
	case protocol.ResultPending:
		return outPending
	}
	return outError
}

// warmRedis loads the scripts (so the first calls are EVALSHA hits).
func warmRedis(ctx context.Context, rdb *redis.Client) error {
	for _, s := range []*redis.Script{scriptGCRA, scriptHit} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return fmt.Errorf("redis: SCRIPT LOAD: %w", err)
		}
	}
	return nil
}
