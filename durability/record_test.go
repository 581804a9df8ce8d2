package durability_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/durability"
)

// CheckClusterStart waits for a cluster catching up, and calls a loss what
// stays short once the answers stop moving.
func TestCheckClusterStart(t *testing.T) {
	const settle = 300 * time.Millisecond // durability.ClusterSettled, shortened
	log := slog.New(slog.DiscardHandler)
	record := func(t *testing.T) string {
		dir := t.TempDir()
		if err := durability.WriteRecord(filepath.Join(dir, durability.RecordFile), durability.Record{Streams: map[string]uint64{"HOOKS": 10, "KV_c": 4}}); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	t.Run("no record", func(t *testing.T) {
		err := durability.CheckClusterStartSettle(ctx, t.TempDir(), false, settle, log, func(context.Context, []string) (map[string]uint64, error) {
			t.Fatal("a node without a record asked the cluster")
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("catching up", func(t *testing.T) {
		// No answer, then the streams coming back step by step, each step
		// shorter than ClusterSettled... then there.
		var calls atomic.Int64
		start := time.Now()
		err := durability.CheckClusterStartSettle(ctx, record(t), false, settle, log, func(context.Context, []string) (map[string]uint64, error) {
			n := calls.Add(1)
			switch {
			case n < 3:
				return nil, errors.New("no meta leader")
			case time.Since(start) < 2*settle:
				return map[string]uint64{"HOOKS": uint64(n), "KV_c": 4}, nil
			}
			return map[string]uint64{"HOOKS": 12, "KV_c": 4}, nil
		})
		if err != nil {
			t.Fatalf("a cluster that caught up: %v", err)
		}
	})
	t.Run("lost", func(t *testing.T) {
		err := durability.CheckClusterStartSettle(ctx, record(t), false, settle, log, func(context.Context, []string) (map[string]uint64, error) {
			return map[string]uint64{"KV_c": 4}, nil
		})
		var dl *durability.DataLossError
		if !errors.As(err, &dl) || !strings.Contains(err.Error(), "stream HOOKS is missing") || !strings.Contains(err.Error(), "--accept-data-loss=true") {
			t.Fatalf("a cluster without HOOKS: %v, want a DataLossError naming HOOKS and the flag", err)
		}
	})
	t.Run("accepted", func(t *testing.T) {
		dir := record(t)
		err := durability.CheckClusterStartSettle(ctx, dir, true, settle, log, func(context.Context, []string) (map[string]uint64, error) {
			return map[string]uint64{"HOOKS": 3, "KV_c": 4}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		rec, _, err := durability.ReadRecord(filepath.Join(dir, durability.RecordFile))
		if err != nil || rec.Streams["HOOKS"] != 3 {
			t.Fatalf("the record after an accepted loss: %+v %v, want HOOKS at 3", rec, err)
		}
	})
	t.Run("short while another stream moves", func(t *testing.T) {
		// HOOKS stays short while KV_c keeps growing (the nodes already
		// up write their leases): the loss is still decided, refused or
		// accepted, before the deadline.
		for _, accept := range []bool{false, true} {
			var n atomic.Uint64
			moving := func(context.Context, []string) (map[string]uint64, error) {
				return map[string]uint64{"HOOKS": 3, "KV_c": 4 + n.Add(1)}, nil
			}
			deadline, cancel := context.WithTimeout(ctx, 10*settle)
			err := durability.CheckClusterStartSettle(deadline, record(t), accept, settle, log, moving)
			decided := deadline.Err() == nil
			cancel()
			var dl *durability.DataLossError
			if !decided || accept && err != nil || !accept && !errors.As(err, &dl) {
				t.Fatalf("accept=%v: %v (decided before the deadline: %v), want the loss decided once HOOKS stopped moving", accept, err, decided)
			}
		}
	})
	t.Run("a stream catching up does not restart the others", func(t *testing.T) {
		// HOOKS short and the same from the first answer; KV_c short and
		// moving until it passes its record after 2 s. The loss of HOOKS
		// is decided then, not ClusterSettled after KV_c stopped being
		// short (its answers were not HOOKS').
		const settle = time.Second
		start := time.Now()
		var n atomic.Uint64
		err := durability.CheckClusterStartSettle(ctx, record(t), true, settle, log, func(context.Context, []string) (map[string]uint64, error) {
			if time.Since(start) < 2*settle {
				return map[string]uint64{"HOOKS": 3, "KV_c": n.Add(1) % 4}, nil
			}
			return map[string]uint64{"HOOKS": 3, "KV_c": 5}, nil
		})
		if d := time.Since(start); err != nil || d >= 2*settle+settle/2 {
			t.Fatalf("%v after %v, want the loss accepted once KV_c caught up (2 s), not %v after", err, d, settle)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		err := durability.CheckClusterStartSettle(short, record(t), false, settle, log, func(context.Context, []string) (map[string]uint64, error) {
			return nil, errors.New("no meta leader")
		})
		var dl *durability.DataLossError
		if err == nil || errors.As(err, &dl) || !strings.Contains(err.Error(), "did not answer") {
			t.Fatalf("a cluster that never answered: %v, want an error saying so (not a loss)", err)
		}
	})
}
