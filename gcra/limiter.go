package gcra

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/sluice-dev/sluice/internal/option"
)

const (
	// numStripes is fixed so that ChargeAll can name its stripes in a uint64.
	numStripes = 64
	// minSweep is the least number of new keys a stripe takes between two
	// lazy sweeps.
	minSweep = 64
	// evictSample is how many entries WithMaxKeys eviction looks at.
	evictSample = 8
	// shrinkMin is the peak size from which a stripe's map is rebuilt once a
	// sweep leaves it at under a quarter of that peak (Go maps never shrink).
	shrinkMin = 1024
	// smallBatch is the ChargeAll size served without allocating.
	smallBatch = 8
)

// hashSeed picks stripes; per process, so keys cannot be chosen to collide.
var hashSeed = maphash.MakeSeed()

type stripeState struct {
	mu      sync.Mutex
	m       map[string]int64 // key -> TAT (µs); nil until the first insert
	inserts int              // new keys since the last sweep
	next    int              // the len after the last sweep
	peak    int              // the largest len since the map was made
}

// stripe is padded to two cache lines so neighbouring locks do not share one.
type stripe struct {
	stripeState
	_ [128 - unsafe.Sizeof(stripeState{})%128]byte
}

// Limiter is a node-local set of GCRA buckets named by string keys: the
// fallback for the fleet-wide limits when the quota owner cannot be reached.
// Each bucket follows Limit.Charge exactly; a key with no bucket is full.
// It never reads a clock: methods take now, in microseconds (see Micros).
//
// Memory: a bucket whose TAT is <= now is full and is dropped. Each of the
// 64 stripes sweeps itself once it has taken as many new keys as it held
// after its previous sweep (at least 64), so it holds at most about twice
// its non-idle buckets plus 64, at amortized O(1) per new key; WithMaxKeys
// adds a hard bound. Eviction trusts now: a now far ahead drops buckets not
// yet full at the real time.
//
// Safe for concurrent use; starts no goroutines. The zero value is ready to
// use, with no key bound. It must not be copied after first use.
type Limiter struct {
	stripes   [numStripes]stripe
	perStripe int // max keys per stripe; 0 = unbounded
}

// Option configures NewLimiter.
type Option interface{ applyLimiter(*Limiter) error }

type limiterOption func(*Limiter) error

func (o limiterOption) applyLimiter(l *Limiter) error { return o(l) }

// WithMaxKeys bounds the number of buckets to about n: each of the 64 stripes
// holds at most ceil(n/64) (an all-or-nothing ChargeAll may exceed its stripe's
// share by its own keys). A new key in a stripe at its bound first evicts, from
// a small random sample of that stripe, an idle bucket or else the one closest
// to full. Evicting a bucket that is not yet full refills it early — the
// bound fails open rather than refusing new keys. n must be >= 1.
func WithMaxKeys(n int) Option {
	return limiterOption(option.Positive(errInvalidOption, "max keys", n, func(l *Limiter, n int) { l.perStripe = n/numStripes + min(n%numStripes, 1) }))
}

// NewLimiter returns an empty Limiter configured by opts. The error wraps
// protocol.ErrInvalidOption when an option has an invalid argument.
func NewLimiter(opts ...Option) (*Limiter, error) {
	l := &Limiter{}
	if err := option.Apply(l, opts, Option.applyLimiter); err != nil {
		return nil, err
	}
	return l, nil
}

func stripeIndex(key string) int {
	return int(maphash.String(hashSeed, key) & (numStripes - 1))
}

// Charge applies one charge of lim to the bucket key at now (µs since the
// Unix epoch) and returns the decision; a denied charge changes nothing. The
// error wraps ErrInvalidLimit or ErrImpossible when lim fails Validate; the
// bucket is then untouched.
func (l *Limiter) Charge(key string, lim Limit, now int64) (Decision, error) {
	if !lim.valid() {
		return Decision{}, lim.Validate()
	}
	s := &l.stripes[stripeIndex(key)]
	s.mu.Lock()
	tat, ok := s.m[key]
	if !ok {
		tat = now // no bucket: full at any now
	}
	d := lim.Charge(tat, now)
	if d.Allowed {
		if ok {
			s.m[key] = d.TAT
		} else {
			l.insert(s, key, d.TAT, now, nil)
		}
	}
	s.mu.Unlock()
	return d, nil
}

// ChargeAll applies the charges lims[i] to the buckets keys[i] at now, all or
// nothing and atomically with respect to every other method; a repeated key's
// charges apply one after the other. The Decision combines them: RetryAfter
// the largest wait of the denied ones, Remaining the smallest (0 when
// denied), ResetAfter the largest, TAT 0. No charges: allowed. The error
// wraps ErrInvalidLimit or ErrImpossible, and nothing is applied. It
// allocates only for more than 8 keys (besides growing its maps).
func (l *Limiter) ChargeAll(keys []string, lims []Limit, now int64) (Decision, error) {
	if len(keys) != len(lims) {
		return Decision{}, fmt.Errorf("%w: %d keys for %d limits", ErrInvalidLimit, len(keys), len(lims))
	}
	if err := validateAll(lims); err != nil {
		return Decision{}, err
	}
	switch len(keys) {
	case 0:
		return Decision{Allowed: true}, nil
	case 1:
		return l.Charge(keys[0], lims[0], now)
	}

	var idxBuf [smallBatch]uint8
	var decBuf [smallBatch]Decision
	idx, decs := idxBuf[:0], decBuf[:]
	if len(keys) > smallBatch {
		idx, decs = make([]uint8, 0, len(keys)), make([]Decision, len(keys))
	}
	decs = decs[:len(keys)]
	var mask uint64
	for _, k := range keys {
		i := stripeIndex(k)
		idx = append(idx, uint8(i))
		mask |= 1 << i
	}
	l.lock(mask)

	Decide(lims, func(i int) int64 {
		for j := i - 1; j >= 0; j-- { // an earlier charge on the same key
			if keys[j] == keys[i] {
				return decs[j].TAT
			}
		}
		if tat, ok := l.stripes[idx[i]].m[keys[i]]; ok {
			return tat
		}
		return now
	}, now, decs)
	var c combined
	for _, d := range decs {
		c.add(d)
	}
	d := c.result()
	if d.Allowed {
		for i, k := range keys {
			s := &l.stripes[idx[i]]
			if _, ok := s.m[k]; ok {
				s.m[k] = decs[i].TAT
			} else {
				l.insert(s, k, decs[i].TAT, now, keys)
			}
		}
	} else {
		d.ResetAfter = 0 // nothing was applied: report the buckets as they are
		for i, k := range keys {
			if tat, ok := l.stripes[idx[i]].m[k]; ok {
				d.ResetAfter = max(d.ResetAfter, microsDuration(ahead(tat, now)))
			}
		}
	}
	l.unlock(mask)
	return d, nil
}

// lock takes the stripe locks in mask in ascending order (so that two
// ChargeAll calls cannot deadlock).
func (l *Limiter) lock(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		l.stripes[bits.TrailingZeros64(m)].mu.Lock()
	}
}

func (l *Limiter) unlock(mask uint64) {
	for m := mask; m != 0; m &= m - 1 {
		l.stripes[bits.TrailingZeros64(m)].mu.Unlock()
	}
}

// insert adds a new key to s (locked), sweeping and evicting as documented on
// Limiter and WithMaxKeys. protect lists keys that must not be evicted.
func (l *Limiter) insert(s *stripe, key string, tat, now int64, protect []string) {
	if s.m == nil {
		s.m = make(map[string]int64)
	}
	if s.inserts >= max(s.next, minSweep) {
		s.sweep(now)
	}
	if l.perStripe > 0 && len(s.m) >= l.perStripe {
		s.evict(now, protect)
	}
	s.m[key] = tat
	s.inserts++
	s.peak = max(s.peak, len(s.m))
}

// sweep drops the idle buckets of s (locked) and returns how many.
func (s *stripe) sweep(now int64) int {
	n := 0
	for k, tat := range s.m {
		if tat <= now {
			delete(s.m, k)
			n++
		}
	}
	s.inserts, s.next = 0, len(s.m)
	if s.peak >= shrinkMin && len(s.m) < s.peak/4 {
		s.m = maps.Clone(s.m)
		s.peak = len(s.m)
	}
	return n
}

// evict drops one bucket of s (locked) that is not in protect: the first idle
// one met, else the smallest TAT among evictSample entries.
func (s *stripe) evict(now int64, protect []string) {
	var victim string
	var best int64
	found, seen := false, 0
	for k, tat := range s.m {
		if slices.Contains(protect, k) {
			continue
		}
		if !found || tat < best {
			victim, best, found = k, tat, true
		}
		if seen++; tat <= now || seen >= evictSample {
			break
		}
	}
	if found {
		delete(s.m, victim)
	}
}

// Refund undoes one admitted charge of lim on the bucket key at now, as
// Limit.Refund does (never fuller than full). An absent key is already full;
// a bucket that becomes full is dropped; an invalid lim refunds nothing.
func (l *Limiter) Refund(key string, lim Limit, now int64) {
	s := &l.stripes[stripeIndex(key)]
	s.mu.Lock()
	if tat, ok := s.m[key]; ok {
		if tat = lim.Refund(tat, now); tat <= now {
			delete(s.m, key)
		} else {
			s.m[key] = tat
		}
	}
	s.mu.Unlock()
}

// Reset drops the bucket key, making it full.
func (l *Limiter) Reset(key string) {
	s := &l.stripes[stripeIndex(key)]
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// ResetPrefix drops every bucket whose key starts with prefix, making each
// full, and returns how many it dropped. It reads every bucket, one stripe
// locked at a time: for rare calls (an admin reset), not a hot path.
func (l *Limiter) ResetPrefix(prefix string) int {
	n := 0
	for i := range l.stripes {
		s := &l.stripes[i]
		s.mu.Lock()
		for k := range s.m {
			if strings.HasPrefix(k, prefix) {
				delete(s.m, k)
				n++
			}
		}
		s.mu.Unlock()
	}
	return n
}

// Sweep drops every idle bucket (TAT <= now) and returns how many it dropped.
// It locks one stripe at a time.
func (l *Limiter) Sweep(now int64) int {
	n := 0
	for i := range l.stripes {
		s := &l.stripes[i]
		s.mu.Lock()
		n += s.sweep(now)
		s.mu.Unlock()
	}
	return n
}

// Len returns the number of buckets held, idle ones included. It locks one
// stripe at a time, so under concurrent use the count is approximate.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.stripes {
		s := &l.stripes[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}
