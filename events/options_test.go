package events_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-dev/sluice/events"
	"github.com/sluice-dev/sluice/protocol"
)

func TestOptionsRejectBadValues(t *testing.T) {
	t.Parallel()
	// Each constructor takes its own option type: an option it does not
	// read does not compile (WithClock is no SettlerOption).
	e := newEnv(t)
	for name, o := range map[string]events.PublisherOption{
		"clock": events.WithClock(nil),
		"queue": events.WithQueueSize(0),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := events.NewPublisher(e.k.Conn, prefix, o); !errors.Is(err, protocol.ErrInvalidOption) {
				t.Fatalf("NewPublisher: %v, want errInvalidOption", err)
			}
		})
	}
	for name, o := range map[string]events.SettlerOption{
		"replicas 0":  events.WithReplicas(0),
		"replicas 6":  events.WithReplicas(6),
		"limits":      events.WithStreamLimits(0, 1, 1),
		"retry":       events.WithRetryDelay(2*time.Second, time.Second),
		"max deliver": events.WithMaxDeliver(0),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := events.NewSettler(e.k.JS, e.store, storeCommitter{e.store}, prefix, o); !errors.Is(err, protocol.ErrInvalidOption) {
				t.Fatalf("NewSettler: %v, want errInvalidOption", err)
			}
		})
	}
	if _, err := events.NewSettler(e.k.JS, e.store, storeCommitter{e.store}, "bad prefix"); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Fatalf("bad prefix: %v", err)
	}
	if _, err := events.NewPublisher(nil, prefix); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Fatalf("nil conn: %v", err)
	}
	if _, err := events.NewExpiryWatcher(e.k.JS, e.bucket.Name(), nil); !errors.Is(err, protocol.ErrInvalidOption) {
		t.Fatalf("nil publisher: %v", err)
	}
}
