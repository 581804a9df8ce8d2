package cooldown

import (
	"time"

	"github.com/sluice-dev/sluice/kvstore"
	"github.com/sluice-dev/sluice/protocol"
)

// reading is a Reading as stored: its figures plus the instant its TTL runs
// out (by the writer's clock), which Load checks because the key holding it
// may live longer (a penalty can outlast the reading).
type reading struct {
	ObservedAtMs int64               `json:"observed_at_ms"`
	Snapshots    []protocol.Snapshot `json:"snapshots,omitempty"`
	ExpiresAtMs  int64               `json:"expires_at_ms"`
}

// state is the value of one (account, backend) key: the newest reading and
// the penalty, both optional.
type state struct {
	Reading        *reading `json:"reading,omitempty"`
	PenaltyUntilMs *int64   `json:"penalty_until_ms,omitempty"`
}

// prune forgets a reading whose TTL has run out and a penalty whose instant
// has passed.
func (s *state) prune(nowMs int64) {
	if s.Reading != nil && s.Reading.ExpiresAtMs <= nowMs {
		s.Reading = nil
	}
	if s.PenaltyUntilMs != nil && *s.PenaltyUntilMs <= nowMs {
		s.PenaltyUntilMs = nil
	}
}

// applyReading keeps the newer of the stored and the new reading (ties: the
// new one) and drops a penalty whose instant the new reading has reached.
func (s *state) applyReading(r *reading) {
	s.Reading = newer(s.Reading, r)
	if s.PenaltyUntilMs != nil && *s.PenaltyUntilMs <= r.ObservedAtMs {
		s.PenaltyUntilMs = nil
	}
}

func (s *state) empty() bool { return s.Reading == nil && s.PenaltyUntilMs == nil }

// expiresAtMs is when nothing in the state is live any more: the later of
// the reading's expiry and the penalty's instant.
func (s *state) expiresAtMs() int64 {
	var t int64
	if s.Reading != nil {
		t = s.Reading.ExpiresAtMs
	}
	if s.PenaltyUntilMs != nil && *s.PenaltyUntilMs > t {
		t = *s.PenaltyUntilMs
	}
	return t
}

// maxKeyTTL caps a key's TTL (a penalty may lie centuries ahead, a
// time.Duration cannot).
const maxKeyTTL = 100 * 365 * 24 * time.Hour

// keyTTL is the TTL that keeps a key alive until expiresAtMs: rounded up to
// whole seconds, at least 1 s, at most maxKeyTTL.
func keyTTL(expiresAtMs, nowMs int64) time.Duration {
	d := expiresAtMs - nowMs
	if d >= maxKeyTTL.Milliseconds() {
		return maxKeyTTL
	}
	return kvstore.RoundTTL(time.Duration(d) * time.Millisecond)
}

// newer is the reading with the later observation (b on a tie), either may
// be nil.
func newer(a, b *reading) *reading {
	return either(a, b, func(a, b *reading) bool { return b.ObservedAtMs >= a.ObservedAtMs })
}

// later is the later of two optional instants (a on a tie).
func later(a, b *int64) *int64 {
	return either(a, b, func(a, b *int64) bool { return *b > *a })
}

// either is whichever of a and b is not nil, or, both being set, b when
// takeB(a, b) and a otherwise.
func either[T any](a, b *T, takeB func(a, b *T) bool) *T {
	switch {
	case a == nil:
		return b
	case b == nil || !takeB(a, b):
		return a
	}
	return b
}

// entry builds the Load view of a reading and a penalty, copying so that the
// caller cannot reach stored state.
func entry(backend string, r *reading, penalty *int64) protocol.Entry {
	e := protocol.Entry{Backend: backend, Snapshots: []protocol.Snapshot{}}
	if r != nil {
		e.LastCheckedMs = ptr(r.ObservedAtMs)
		e.Snapshots = append(e.Snapshots, r.Snapshots...)
	}
	if penalty != nil {
		e.PenaltyUntilMs = ptr(*penalty)
	}
	return e
}

func ptr(v int64) *int64 { return &v }
