package timeconv

import (
	"math"
	"testing"
	"time"
)

func TestCeil(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{-time.Second, 0},
		{0, 0},
		{1, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{1500 * time.Microsecond, 2},
		{time.Hour, 3_600_000},
		{math.MaxInt64, math.MaxInt64/int64(time.Millisecond) + 1},
	} {
		if got := CeilMs(tc.d); got != tc.want {
			t.Errorf("CeilMs(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}
