package limits

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/gcra"
)

func TestRateValidate(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string // "" for valid; else a substring of the error
	}{
		{Rate{Rate: 0.5, Burst: 1}, ""},
		{Rate{Rate: 1e6, Burst: 1 << 40}, ""},
		{Rate{Rate: 0, Burst: 1}, "rate must be a finite number > 0, got 0"},
		{Rate{Rate: -1, Burst: 1}, "rate must be a finite number > 0, got -1"},
		{Rate{Rate: math.NaN(), Burst: 1}, "rate must be a finite number > 0, got NaN"},
		{Rate{Rate: math.Inf(1), Burst: 1}, "rate must be a finite number > 0, got +Inf"},
		{Rate{Rate: 1, Burst: 0}, "burst must be >= 1, got 0"},
		// Positive and finite, but no limit fits int64 microseconds: the
		// gcra rule refuses them, so Validate does.
		{Rate{Rate: 1e-300, Burst: 1}, "rate 1e-300 with burst 1: "},
		{Rate{Rate: 0.001, Burst: math.MaxInt64}, "with burst 9223372036854775807: "},
	} {
		err := c.r.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", c.r, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error with %q", c.r, err, c.want)
		}
		// The one rule agrees with the limit every hook computes.
		if _, gerr := gcra.LimitFromRate(c.r.Rate, c.r.Burst); (gerr == nil) != (err == nil) {
			t.Errorf("%+v: Validate %v but LimitFromRate %v", c.r, err, gerr)
		}
	}
}

func TestLimitsValidateNamesTheRate(t *testing.T) {
	ok := Rate{Rate: 1, Burst: 1}
	if err := (Limits{Hooks: ok, Bytes: ok}).Validate(); err != nil {
		t.Fatal(err)
	}
	err := Limits{Hooks: ok, Bytes: Rate{Rate: 1e-300, Burst: 1}}.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "bytes: ") || !errors.Is(err, gcra.ErrInvalidLimit) {
		t.Fatalf("bytes too slow: %v", err)
	}
	if err := (Limits{Hooks: Rate{Burst: 1}, Bytes: ok}).Validate(); err == nil || !strings.HasPrefix(err.Error(), "hooks: ") {
		t.Fatalf("hooks zero: %v", err)
	}
}
