package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestDoubling: min, doubled each time, held at the cap, and again from
// min after Reset: the exact sequence the retry loops wait.
func TestDoubling(t *testing.T) {
	b := Doubling(2*time.Millisecond, 25*time.Millisecond)
	want := []time.Duration{2, 4, 8, 16, 25, 25}
	for i, w := range want {
		if got := b.NextBackOff(); got != w*time.Millisecond {
			t.Fatalf("wait %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.NextBackOff(); got != 2*time.Millisecond {
		t.Fatalf("after Reset: %v, want 2ms", got)
	}
}

// TestSleep: a sleep ends with its context, at once for one that ended.
func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) || time.Since(start) > time.Minute {
		t.Fatalf("ended context: %v after %v", err, time.Since(start))
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
}
