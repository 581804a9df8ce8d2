package owner

import (
	"hash/maphash"

	"github.com/sluice-dev/sluice/protocol"
)

// maxKindSlots bounds the charge kinds a partition keys by hash. The edge
// uses two (hooks, bytes); kinds beyond the first maxKindSlots a tenure sees
// are kept in an exact map (slower, larger, never wrong).
const maxKindSlots = 32

// bucketState is one partition's GCRA state: one TAT (µs) per (kind,
// tenant) bucket; a bucket with no entry is full. The tenure's mu guards it.
//
// Layout, for ≤ 64 bytes per idle bucket: the key is a 64-bit hash of the
// tenant seeded by the kind's slot (random per tenure, so nobody can pick
// colliding names), the value the TAT; no tenant string is kept. Colliding
// buckets (about n²/2⁶⁵) share one TAT, which can only make a bucket
// stricter, never admit more. Kinds are interned in slots so that Reset can
// find a tenant's buckets without a tenant index.
type bucketState struct {
	tats  map[uint64]int64
	kinds []string       // slot -> kind
	seeds []maphash.Seed // slot -> seed
	// over holds buckets of kinds beyond maxKindSlots: tenant -> kind -> TAT.
	over map[string]map[string]int64
}

func newBucketState() bucketState {
	return bucketState{tats: make(map[uint64]int64)}
}

// slot returns the slot of kind, adding it when add is set and there is
// room; -1 when the kind has none.
func (s *bucketState) slot(kind []byte, add bool) int {
	for i, k := range s.kinds {
		if k == string(kind) {
			return i
		}
	}
	if !add || len(s.kinds) == maxKindSlots {
		return -1
	}
	s.kinds = append(s.kinds, internKind(kind))
	s.seeds = append(s.seeds, maphash.MakeSeed())
	return len(s.kinds) - 1
}

// bucketRef names one bucket: a slot and the tenant's hash under its seed,
// or (slot -1) the exact kind and tenant of an overflow bucket.
type bucketRef struct {
	slot   int
	key    uint64
	kind   string
	tenant string
}

// ref resolves (kind, tenant). add: a new kind may take a slot.
func (s *bucketState) ref(kind, tenant []byte, add bool) bucketRef {
	if i := s.slot(kind, add); i >= 0 {
		return bucketRef{slot: i, key: maphash.Bytes(s.seeds[i], tenant)}
	}
	return bucketRef{slot: -1, kind: string(kind), tenant: string(tenant)}
}

// get returns the bucket's TAT (0: full).
func (s *bucketState) get(r *bucketRef) int64 {
	if r.slot >= 0 {
		return s.tats[r.key]
	}
	return s.over[r.tenant][r.kind]
}

// set stores the bucket's TAT; a TAT <= now is a full bucket and is
// dropped.
func (s *bucketState) set(r *bucketRef, tat, now int64) {
	if r.slot >= 0 {
		if tat <= now {
			delete(s.tats, r.key)
		} else {
			s.tats[r.key] = tat
		}
		return
	}
	m := s.over[r.tenant]
	if tat <= now {
		delete(m, r.kind)
		if len(m) == 0 {
			delete(s.over, r.tenant)
		}
		return
	}
	if m == nil {
		if s.over == nil {
			s.over = make(map[string]map[string]int64)
		}
		m = make(map[string]int64, 1)
		s.over[r.tenant] = m
	}
	m[r.kind] = tat
}

// reset forgets every bucket of tenant.
func (s *bucketState) reset(tenant string) {
	for i := range s.kinds {
		delete(s.tats, maphash.String(s.seeds[i], tenant))
	}
	delete(s.over, tenant)
}

// sweep drops full buckets (TAT <= now).
func (s *bucketState) sweep(now int64) {
	for k, tat := range s.tats {
		if tat <= now {
			delete(s.tats, k)
		}
	}
	for tenant, m := range s.over {
		for kind, tat := range m {
			if tat <= now {
				delete(m, kind)
			}
		}
		if len(m) == 0 {
			delete(s.over, tenant)
		}
	}
}

// internKind returns kind as a string, without allocating for the edge's
// kinds.
func internKind(kind []byte) string {
	switch string(kind) {
	case protocol.KindHooks:
		return protocol.KindHooks
	case protocol.KindBytes:
		return protocol.KindBytes
	}
	return string(kind)
}
