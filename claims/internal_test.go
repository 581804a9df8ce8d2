package claims

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/protocol"
)

func TestNormTTL(t *testing.T) {
	cases := []struct {
		in, want time.Duration
		err      bool
	}{
		{in: -1, err: true},
		{in: 0, want: time.Second},
		{in: 1, want: time.Second},
		{in: time.Second, want: time.Second},
		{in: 1500 * time.Millisecond, want: 2 * time.Second},
		{in: 72 * time.Hour, want: 72 * time.Hour},
		{in: MaxTTL + 1, want: MaxTTL},
		{in: math.MaxInt64, want: MaxTTL},
	}
	for i, c := range cases {
		got, err := normTTL(c.in)
		if (err != nil) != c.err || (err != nil && !errors.Is(err, protocol.ErrInvalid)) || got != c.want {
			t.Errorf("%d: normTTL(%v) = %v, %v; want %v (error %v)", i, c.in, got, err, c.want, c.err)
		}
	}
}

func TestReplayTTL(t *testing.T) {
	now := time.Unix(1000, 250_000_000)
	cases := []struct {
		until int64
		want  time.Duration
	}{
		{1000, time.Second},     // already past: the 1 s minimum
		{0, time.Second},        // long past
		{1001, time.Second},     // 0.75 s away
		{1002, 2 * time.Second}, // 1.75 s, rounded up
		{1015, 15 * time.Second},
		{protocol.MaxRetainUntil, MaxTTL}, // far future: capped
	}
	for i, c := range cases {
		if got := replayTTL(c.until, now); got != c.want {
			t.Errorf("%d: replayTTL(%d) = %v, want %v", i, c.until, got, c.want)
		}
	}
}

func TestValueCodec(t *testing.T) {
	for _, hook := range []string{"h1", `"quoted"\`, "<&>", "日本", "\x00\n"} {
		for _, st := range []string{valuePending, valueCommitted} {
			v, ok := decodeValue(encodeValue(st, hook))
			if !ok || v.S != st || v.H != hook {
				t.Errorf("round trip %q/%q: %+v %v", st, hook, v, ok)
			}
		}
	}
	for _, bad := range []string{"", "null", "{}", `{"s":"x","h":"a"}`, `{"s":"p","h":""}`, `{"s":"p"}`, "garbage", `["p","h"]`} {
		if _, ok := decodeValue([]byte(bad)); ok {
			t.Errorf("decodeValue(%q) accepted", bad)
		}
	}
	if got := string(encodeValue(valuePending, "h1")); got != `{"s":"p","h":"h1"}` {
		t.Errorf("pending value %s", got)
	}
}

// TestOutcomeNames: every outcome's wire name, and a value out of range
// named by its type.
func TestOutcomeNames(t *testing.T) {
	for _, c := range []struct {
		got  fmt.Stringer
		want string
	}{
		{OK, "ok"}, {Duplicate, "duplicate"}, {Pending, "pending"}, {Outcome(0), "Outcome(0)"}, {Outcome(4), "Outcome(4)"},
		{protocol.Claimed, "claimed"}, {protocol.AlreadyClaimed, "already_claimed"}, {protocol.Full, "full"}, {protocol.ReplayOutcome(-1), "ReplayOutcome(-1)"},
	} {
		if s := c.got.String(); s != c.want {
			t.Errorf("%s, want %s", s, c.want)
		}
	}
}
