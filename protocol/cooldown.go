package protocol

import (
	"encoding/json"
	"fmt"
	"math"
)

// Bounds of the cooldown.* requests (names: MaxNameBytes).
const (
	// MaxBackends bounds the backends of one Load (at least 1).
	MaxBackends = 100
	// MaxSnapshots bounds the snapshots of one reading.
	MaxSnapshots = 64
	// MaxSnapshotFieldBytes bounds a snapshot's key and label.
	MaxSnapshotFieldBytes = 256
	// MaxTimeMs is the latest instant accepted in any _ms field:
	// 9999-12-31T23:59:59.999Z in Unix milliseconds.
	MaxTimeMs int64 = 253402300799999
)

// Snapshot is one quota figure an instance read from an upstream, e.g. the
// share of a token budget left and when it resets. Times are Unix
// milliseconds.
type Snapshot struct {
	// Key identifies the figure (e.g. "tokens_per_minute"); at most
	// MaxSnapshotFieldBytes bytes.
	Key string `json:"key"`
	// Label is a human-readable name; at most MaxSnapshotFieldBytes bytes.
	Label string `json:"label"`
	// Percent is the figure as a percentage; it must be finite. Its range is
	// the caller's convention (sluice does not clamp it).
	Percent float64 `json:"percent"`
	// ResetsAtMs is when the upstream resets the figure (0..MaxTimeMs).
	ResetsAtMs int64 `json:"resets_at_ms"`
	// ObservedAtMs is when the figure was read (0..MaxTimeMs).
	ObservedAtMs int64 `json:"observed_at_ms"`
}

// Reading is a quota snapshot set an instance observed for one backend of an
// account at ObservedAtMs (Unix ms). It is also the body of
// sluice.v1.cooldown.record (see RecordRequest).
type Reading struct {
	// Account is the shared budget the backend is used under (1..MaxNameBytes
	// bytes, any bytes). Keys are scoped by account, never by instance.
	Account string `json:"account"`
	// Backend names the upstream (1..MaxNameBytes bytes, any bytes).
	Backend string `json:"backend"`
	// ObservedAtMs is when the reading was taken (0..MaxTimeMs). A reading
	// clears a penalty whose until_ms <= ObservedAtMs: the upstream answered
	// at that instant, so it no longer refuses us.
	ObservedAtMs int64 `json:"observed_at_ms"`
	// Snapshots are the figures read (at most MaxSnapshots; nil = none).
	Snapshots []Snapshot `json:"snapshots"`
}

// RecordRequest is the body of sluice.v1.cooldown.record:
// {"account","backend","observed_at_ms","snapshots":[…]}.
type RecordRequest = Reading

// Validate checks a reading: account and backend 1..MaxNameBytes bytes,
// times in 0..MaxTimeMs, at most MaxSnapshots snapshots, each with a finite
// percent and key and label of at most MaxSnapshotFieldBytes bytes. The error
// wraps ErrInvalid and names the field.
func (r *Reading) Validate() error {
	if err := validateName("account", r.Account); err != nil {
		return err
	}
	if err := validateName("backend", r.Backend); err != nil {
		return err
	}
	if err := validateTime("observed_at_ms", r.ObservedAtMs); err != nil {
		return err
	}
	if len(r.Snapshots) > MaxSnapshots {
		return fmt.Errorf("%w: snapshots: at most %d, got %d", ErrInvalid, MaxSnapshots, len(r.Snapshots))
	}
	for i := range r.Snapshots {
		s := &r.Snapshots[i]
		switch {
		case len(s.Key) > MaxSnapshotFieldBytes:
			return fmt.Errorf("%w: snapshots[%d].key: at most %d bytes", ErrInvalid, i, MaxSnapshotFieldBytes)
		case len(s.Label) > MaxSnapshotFieldBytes:
			return fmt.Errorf("%w: snapshots[%d].label: at most %d bytes", ErrInvalid, i, MaxSnapshotFieldBytes)
		case math.IsNaN(s.Percent) || math.IsInf(s.Percent, 0):
			return fmt.Errorf("%w: snapshots[%d].percent must be finite", ErrInvalid, i)
		}
		if err := validateTime(fmt.Sprintf("snapshots[%d].resets_at_ms", i), s.ResetsAtMs); err != nil {
			return err
		}
		if err := validateTime(fmt.Sprintf("snapshots[%d].observed_at_ms", i), s.ObservedAtMs); err != nil {
			return err
		}
	}
	return nil
}

// PenalizeRequest is the body of sluice.v1.cooldown.penalize:
// {"account","backend","until_ms":N|null}. A null (or absent) until_ms
// clears the penalty.
type PenalizeRequest struct {
	// Account and Backend as in Reading.
	Account string `json:"account"`
	Backend string `json:"backend"`
	// UntilMs is the instant (Unix ms, 0..MaxTimeMs) until which the upstream
	// refuses us; nil clears the penalty.
	UntilMs *int64 `json:"until_ms"`
}

// Validate checks a penalize request: account and backend 1..MaxNameBytes
// bytes, until_ms (when set) in 0..MaxTimeMs. The error wraps ErrInvalid.
func (r *PenalizeRequest) Validate() error {
	if err := validateName("account", r.Account); err != nil {
		return err
	}
	if err := validateName("backend", r.Backend); err != nil {
		return err
	}
	if r.UntilMs != nil {
		return validateTime("until_ms", *r.UntilMs)
	}
	return nil
}

// LoadRequest is the body of sluice.v1.cooldown.load:
// {"account","backends":["b1","b2"]}.
type LoadRequest struct {
	// Account as in Reading.
	Account string `json:"account"`
	// Backends to report, 1..MaxBackends names of 1..MaxNameBytes bytes.
	Backends []string `json:"backends"`
}

// Validate checks a load request: account 1..MaxNameBytes bytes, 1..MaxBackends
// backends of 1..MaxNameBytes bytes each (duplicates allowed). The error
// wraps ErrInvalid.
func (r *LoadRequest) Validate() error {
	if err := validateName("account", r.Account); err != nil {
		return err
	}
	if len(r.Backends) == 0 || len(r.Backends) > MaxBackends {
		return fmt.Errorf("%w: backends: must have 1..%d entries, got %d", ErrInvalid, MaxBackends, len(r.Backends))
	}
	for i, b := range r.Backends {
		if err := validateName(fmt.Sprintf("backends[%d]", i), b); err != nil {
			return err
		}
	}
	return nil
}

// Entry is the fleet's view of one backend of an account, as
// cooldown.load answers it (and cooldown.Store's Load returns it).
// Its JSON form is
// {"backend","last_checked_ms":N|null,"snapshots":[…],"penalty_until_ms":N|null};
// snapshots is never null.
type Entry struct {
	// Backend is the requested backend name.
	Backend string `json:"backend"`
	// LastCheckedMs is the ObservedAtMs of the newest live reading, nil when
	// there is none (never recorded, or its TTL ran out).
	LastCheckedMs *int64 `json:"last_checked_ms"`
	// Snapshots of that reading (empty, never nil, from Load).
	Snapshots []Snapshot `json:"snapshots"`
	// PenaltyUntilMs is the instant until which the upstream refuses us, nil
	// when there is no penalty or its instant has passed.
	PenaltyUntilMs *int64 `json:"penalty_until_ms"`
	// Fallback is set (never on the wire) when the shared store could not answer
	// within the budget and the entry comes from node-local state.
	Fallback bool `json:"-"`
}

// MarshalJSON encodes the entry with "snapshots":[] rather than null when it
// has none.
func (e Entry) MarshalJSON() ([]byte, error) {
	type plain Entry // no methods: no recursion
	p := plain(e)
	if p.Snapshots == nil {
		p.Snapshots = []Snapshot{}
	}
	return json.Marshal(p)
}

// LoadReply is the reply of sluice.v1.cooldown.load: one entry per
// requested backend, in the order requested.
type LoadReply struct {
	Backends []Entry `json:"backends"`
}

func validateTime(field string, ms int64) error {
	if ms < 0 || ms > MaxTimeMs {
		return fmt.Errorf("%w: %s must be in 0..%d, got %d", ErrInvalid, field, MaxTimeMs, ms)
	}
	return nil
}
